// tests/crash/reproducer.h - a crash the checker found, saved so that it
// can be replayed exactly: the media image after the crash (before any
// recovery ran), and what the contract promised about it.
//
// File format (version 1):
//   "pmhash-crash-reproducer 1\n"
//   "<field> <value>\n" ...          engine, seed, threads, ops, keys,
//                                    granularity, windows, crash_point, ...
//   "image <bytes>\n"
//   then the image, sparse: records {u64 offset, u32 length, bytes},
//   ending with offset = ~0. Bytes not in a record are zero.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace pmhash::crashtest {

struct Reproducer {
  std::map<std::string, std::string> fields;
  std::vector<std::byte> image;

  const std::string& field(const std::string& name) const {
    static const std::string empty;
    const auto it = fields.find(name);
    return it == fields.end() ? empty : it->second;
  }
};

inline bool write_reproducer(const std::string& path, const Reproducer& r) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << "pmhash-crash-reproducer 1\n";
  for (const auto& [k, v] : r.fields) out << k << ' ' << v << '\n';
  out << "image " << r.image.size() << '\n';
  constexpr std::size_t kLine = 64;
  auto zero_line = [&](std::size_t off) {
    const std::size_t n = std::min(kLine, r.image.size() - off);
    for (std::size_t i = 0; i < n; ++i) {
      if (r.image[off + i] != std::byte{0}) return false;
    }
    return true;
  };
  std::size_t off = 0;
  while (off < r.image.size()) {
    if (zero_line(off)) {
      off += kLine;
      continue;
    }
    std::size_t end = off;
    while (end < r.image.size() && !zero_line(end)) end += kLine;
    end = std::min(end, r.image.size());
    const std::uint64_t o = off;
    const auto n = static_cast<std::uint32_t>(end - off);
    out.write(reinterpret_cast<const char*>(&o), sizeof o);
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out.write(reinterpret_cast<const char*>(r.image.data() + off), n);
    off = end;
  }
  const std::uint64_t stop = ~std::uint64_t{0};
  out.write(reinterpret_cast<const char*>(&stop), sizeof stop);
  return out.good();
}

// Reads a reproducer; "" on success, else what is wrong with the file.
inline std::string read_reproducer(const std::string& path, Reproducer* r) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path;
  std::string line;
  if (!std::getline(in, line) || line != "pmhash-crash-reproducer 1") {
    return path + " is not a pmhash crash reproducer";
  }
  while (std::getline(in, line)) {
    const std::size_t sp = line.find(' ');
    if (sp == std::string::npos) return path + ": bad line '" + line + "'";
    const std::string key = line.substr(0, sp);
    const std::string value = line.substr(sp + 1);
    if (key == "image") {
      const std::uint64_t size = std::stoull(value);
      if (size > (std::uint64_t{1} << 34)) return path + ": image size " + value + " is absurd";
      r->image.assign(size, std::byte{0});
      for (;;) {
        std::uint64_t off = 0;
        std::uint32_t n = 0;
        if (!in.read(reinterpret_cast<char*>(&off), sizeof off)) return path + ": truncated image";
        if (off == ~std::uint64_t{0}) return "";
        if (!in.read(reinterpret_cast<char*>(&n), sizeof n) || off > size || n > size - off) {
          return path + ": bad image record";
        }
        if (!in.read(reinterpret_cast<char*>(r->image.data() + off), n)) return path + ": truncated image";
      }
    }
    r->fields[key] = value;
  }
  return path + ": no image";
}

}  // namespace pmhash::crashtest
