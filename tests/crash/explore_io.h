// tests/crash/explore_io.h - what the crash explorers (tests/crash_explore)
// and their verifier processes hand each other: the oracle's windows as one
// line of text (a request, a reproducer field), and crash images as files.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "crash/oracle.h"

namespace pmhash::crashtest {

// Per thread "done:seen:synced", then for epoch durability "@e=n/e=n...";
// threads separated by commas.
inline std::string windows_text(const std::vector<Window>& ws) {
  std::string out;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    out += (i ? "," : "") + std::to_string(ws[i].done) + ":" + std::to_string(ws[i].seen) + ":" +
           std::to_string(ws[i].synced);
    for (std::size_t k = 0; k < ws[i].by_epoch.size(); ++k) {
      out += (k ? "/" : "@") + std::to_string(ws[i].by_epoch[k].first) + "=" +
             std::to_string(ws[i].by_epoch[k].second);
    }
  }
  return out;
}

// The inverse of windows_text; empty for text of another form.
inline std::vector<Window> parse_windows(const std::string& text) {
  std::vector<Window> ws;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    Window w;
    const std::size_t at = part.find('@');
    std::stringstream counts(part.substr(0, at));
    std::string n;
    std::vector<std::uint64_t> v;
    while (std::getline(counts, n, ':')) v.push_back(std::stoull(n));
    if (v.size() != 3) return {};
    w.done = v[0];
    w.seen = v[1];
    w.synced = v[2];
    if (at != std::string::npos) {
      std::stringstream epochs(part.substr(at + 1));
      while (std::getline(epochs, n, '/')) {
        const std::size_t eq = n.find('=');
        if (eq == std::string::npos) return {};
        w.by_epoch.emplace_back(std::stoull(n.substr(0, eq)), std::stoull(n.substr(eq + 1)));
      }
    }
    ws.push_back(std::move(w));
  }
  return ws;
}

// Writes `n` bytes to a new (or truncated) file at `path`; false on any error.
inline bool write_file(const std::string& path, const std::byte* data, std::size_t n) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < n) {
    const ssize_t w = ::pwrite(fd, data + done, n - done, static_cast<off_t>(done));
    if (w <= 0) break;
    done += static_cast<std::size_t>(w);
  }
  ::close(fd);
  return done == n;
}

inline bool write_file(const std::string& path, const std::vector<std::byte>& image) {
  return write_file(path, image.data(), image.size());
}

}  // namespace pmhash::crashtest
