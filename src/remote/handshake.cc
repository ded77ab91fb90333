#include "remote/handshake.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "remote/net.h"

namespace pmhash::remote::handshake {

namespace {

constexpr char kKeyLabel[] = "pmhash-memnode secret v1";
constexpr char kClientLabel[] = "pmhash-memnode client proof";
constexpr char kNodeLabel[] = "pmhash-memnode node proof";

// Byte offsets of the fields (the layouts in handshake.h).
constexpr std::size_t kHelloRest = 4, kHelloSize = 8, kHelloProtocol = 16, kHelloFlags = 20,
                      kHelloLayout = 24, kHelloNonce = 32;
constexpr std::size_t kClientProtocol = 4, kClientFlags = 8, kClientNonce = 16,
                      kClientProof = 48;
constexpr std::size_t kVerdictStatus = 4, kVerdictMessage = 8, kVerdictFlags = 12,
                      kVerdictProof = 16;

static_assert(kClientProof + kProofBytes == kClientHelloBytes);
static_assert(kHelloNonce + kNonceBytes == kNodeHelloBytes);
static_assert(kVerdictProof + kProofBytes == kVerdictBytes);

template <class T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <class T>
void put(char* p, T v) {
  std::memcpy(p, &v, sizeof(v));
}

bool sodium_ready() { return ::sodium_init() >= 0; }

// HMAC-SHA-256 under the secret's key over label || a || b.
void prove(const Secret& s, const char* label, std::span<const char> a, std::span<const char> b,
           unsigned char out[kProofBytes]) {
  static_assert(crypto_auth_hmacsha256_BYTES == kProofBytes);
  crypto_auth_hmacsha256_state st;
  ::crypto_auth_hmacsha256_init(&st, s.key().data(), s.key().size());
  ::crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label),
                                  std::strlen(label));
  ::crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(a.data()), a.size());
  ::crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(b.data()), b.size());
  ::crypto_auth_hmacsha256_final(&st, out);
  ::sodium_memzero(&st, sizeof(st));
}

// Constant time: the time taken says nothing about where a wrong proof
// first differs.
bool proof_matches(const unsigned char expected[kProofBytes], const char* got) {
  return ::sodium_memcmp(expected, got, kProofBytes) == 0;
}

// A peer's text, made one printable line of at most kMaxMessage bytes.
std::string printable(const char* p, std::size_t n) {
  std::string s(p, std::min(n, kMaxMessage));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return s;
}

void append(std::vector<char>* out, const char* p, std::size_t n) { out->insert(out->end(), p, p + n); }

void append_verdict(const Status& why, const unsigned char* proof, std::vector<char>* out) {
  char v[kVerdictBytes] = {};
  const std::size_t len = std::min(why.message().size(), kMaxMessage);
  put<std::uint32_t>(v, kVerdictMagic);
  put<std::uint32_t>(v + kVerdictStatus, static_cast<std::uint32_t>(why.code()));
  put<std::uint32_t>(v + kVerdictMessage, static_cast<std::uint32_t>(len));
  if (proof != nullptr) {
    put<std::uint32_t>(v + kVerdictFlags, kNodeHasProof);
    std::memcpy(v + kVerdictProof, proof, kProofBytes);
  }
  append(out, v, sizeof(v));
  append(out, why.message().data(), len);
}

Status status_of(std::uint32_t code, std::string message) {
  using C = Status::Code;
  switch (static_cast<C>(code)) {
    case C::kInvalidArgument:
      return Status::InvalidArgument(std::move(message));
    case C::kBusy:
      return Status::Busy(std::move(message));
    case C::kCorruption:
      return Status::Corruption(std::move(message));
    default:
      return Status::IOError(std::move(message));
  }
}

}  // namespace

Secret::~Secret() { ::sodium_memzero(key_.data(), key_.size()); }

Status Secret::load(const std::string& path, Secret* out) {
  const std::string how = "(make one with: head -c 32 /dev/urandom > " + path + " && chmod 600 " +
                          path + ")";
  if (!sodium_ready()) return Status::IOError("secret file " + path + ": libsodium did not start");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Status::IOError("secret file " + path + ": cannot open: " + net::errno_text(errno));
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument("secret file " + path + ": not a regular file " + how);
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return Status::InvalidArgument("secret file " + path + " has mode " + mode +
                                   ": group or others may use it; run chmod 600 " + path);
  }
  if (st.st_size < static_cast<off_t>(kMinSecretBytes) || st.st_size > static_cast<off_t>(kMaxSecretBytes)) {
    ::close(fd);
    return Status::InvalidArgument("secret file " + path + " holds " + std::to_string(st.st_size) +
                                   " bytes: it needs " + std::to_string(kMinSecretBytes) + " to " +
                                   std::to_string(kMaxSecretBytes) + " " + how);
  }
  unsigned char bytes[kMaxSecretBytes];
  std::size_t got = 0;
  while (got < kMaxSecretBytes) {
    const ssize_t n = ::read(fd, bytes + got, kMaxSecretBytes - got);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::sodium_memzero(bytes, sizeof(bytes));
      return Status::IOError("secret file " + path + ": cannot read: " + net::errno_text(err));
    }
    break;
  }
  ::close(fd);
  if (got < kMinSecretBytes) {
    ::sodium_memzero(bytes, sizeof(bytes));
    return Status::InvalidArgument("secret file " + path + " holds " + std::to_string(got) +
                                   " bytes: it needs at least " + std::to_string(kMinSecretBytes) +
                                   " " + how);
  }
  crypto_generichash_state h;
  ::crypto_generichash_init(&h, nullptr, 0, out->key_.size());
  ::crypto_generichash_update(&h, reinterpret_cast<const unsigned char*>(kKeyLabel),
                              sizeof(kKeyLabel) - 1);
  ::crypto_generichash_update(&h, bytes, got);
  ::crypto_generichash_final(&h, out->key_.data(), out->key_.size());
  ::sodium_memzero(bytes, sizeof(bytes));
  ::sodium_memzero(&h, sizeof(h));
  out->set_ = true;
  return Status::OK();
}

NodeSide::NodeSide(const Secret* secret, std::uint64_t region_size, std::uint32_t layout_version)
    : secret_(secret != nullptr && !secret->empty() ? secret : nullptr) {
  char* h = hello_.data();
  put<std::uint32_t>(h, kNodeHelloMagic);
  put<std::uint32_t>(h + kHelloRest, kNodeHelloBytes - kOldNodeHelloBytes);
  put<std::uint64_t>(h + kHelloSize, region_size);
  put<std::uint32_t>(h + kHelloProtocol, kProtocolVersion);
  put<std::uint32_t>(h + kHelloFlags, secret_ != nullptr ? kNodeHasSecret : 0);
  put<std::uint32_t>(h + kHelloLayout, layout_version);
}

void NodeSide::hello(std::vector<char>* out) {
  // A fresh nonce per connection: a proof made for another connection
  // does not match this one.
  (void)sodium_ready();
  ::randombytes_buf(hello_.data() + kHelloNonce, kNonceBytes);
  append(out, hello_.data(), hello_.size());
}

std::size_t NodeSide::on_client_hello(std::span<const char> in, std::vector<char>* out,
                                      Status* verdict) {
  const char* c = in.data();
  // A peer that sends something else than a ClientHello (a request, an old
  // client) is refused at once, without waiting for 80 bytes.
  if (in.size() >= 4 && get<std::uint32_t>(c) != kClientHelloMagic) {
    *verdict = Status::InvalidArgument(
        "expected the client's hello (memory-node protocol " + std::to_string(kProtocolVersion) +
        "); is the client an older pmhash? upgrade it");
    append_verdict(*verdict, nullptr, out);
    return in.size();
  }
  if (in.size() < kClientHelloBytes) return 0;
  const std::uint32_t protocol = get<std::uint32_t>(c + kClientProtocol);
  const std::uint32_t flags = get<std::uint32_t>(c + kClientFlags);
  const std::span<const char> client(c, kClientHelloBytes);
  if (protocol != kProtocolVersion) {
    *verdict = Status::InvalidArgument("the client speaks memory-node protocol " +
                                       std::to_string(protocol) + ", this node " +
                                       std::to_string(kProtocolVersion) +
                                       ": run the same pmhash version on both");
    append_verdict(*verdict, nullptr, out);
    return kClientHelloBytes;
  }
  if (secret_ == nullptr) {
    *verdict = Status::OK();
    append_verdict(*verdict, nullptr, out);
    return kClientHelloBytes;
  }
  if ((flags & kClientHasProof) == 0) {
    *verdict = Status::InvalidArgument(
        "this memory node requires the shared secret and the client gave none: give the client "
        "the node's secret file (option memnode_secret_file, --secret-file, or the environment "
        "variable " + std::string(kSecretFileEnv) + ")");
    append_verdict(*verdict, nullptr, out);
    return kClientHelloBytes;
  }
  unsigned char expected[kProofBytes];
  prove(*secret_, kClientLabel, hello_, client.first(kClientProof), expected);
  if (!proof_matches(expected, c + kClientProof)) {
    *verdict = Status::InvalidArgument(
        "the client's proof does not match this memory node's secret: both must use the same "
        "secret file");
    append_verdict(*verdict, nullptr, out);
    return kClientHelloBytes;
  }
  unsigned char proof[kProofBytes];
  prove(*secret_, kNodeLabel, hello_, client, proof);
  *verdict = Status::OK();
  append_verdict(*verdict, proof, out);
  return kClientHelloBytes;
}

void refusal(const Status& why, std::vector<char>* out) { append_verdict(why, nullptr, out); }

ClientSide::ClientSide(const Secret* secret, std::string node)
    : secret_(secret != nullptr && !secret->empty() ? secret : nullptr), node_(std::move(node)) {}

namespace {

// A whole Verdict at the start of `in`: its size, or 0 while incomplete.
std::size_t verdict_size(std::span<const char> in, const std::string& node, Status* error) {
  if (in.size() < kVerdictBytes) return 0;
  const std::uint32_t len = get<std::uint32_t>(in.data() + kVerdictMessage);
  if (len > kMaxMessage) {
    *error = Status::IOError("memory node " + node + ": a verdict with a message of " +
                             std::to_string(len) + " bytes (protocol error)");
    return in.size();
  }
  if (in.size() - kVerdictBytes < len) return 0;
  return kVerdictBytes + len;
}

}  // namespace

std::size_t ClientSide::on_node_hello(std::span<const char> in, std::vector<char>* out,
                                      Status* error) {
  if (in.size() < 4) return 0;
  const std::uint32_t magic = get<std::uint32_t>(in.data());
  if (magic == kVerdictMagic) {
    // Turned away before the hello (the node's connection cap).
    const std::size_t n = verdict_size(in, node_, error);
    if (n == 0 || !error->ok()) return n;
    *error = status_of(get<std::uint32_t>(in.data() + kVerdictStatus),
                       "memory node " + node_ + " refused the connection: " +
                           printable(in.data() + kVerdictBytes, n - kVerdictBytes));
    return n;
  }
  if (magic != kNodeHelloMagic) {
    *error = Status::IOError("memory node " + node_ + ": not a pmhash-memnode (bad hello)");
    return in.size();
  }
  if (in.size() < kOldNodeHelloBytes) return 0;
  const std::uint32_t protocol = get<std::uint32_t>(in.data() + kHelloProtocol);
  if (protocol != kProtocolVersion ||
      get<std::uint32_t>(in.data() + kHelloRest) != kNodeHelloBytes - kOldNodeHelloBytes) {
    *error = Status::InvalidArgument(
        "memory node " + node_ + " speaks memory-node protocol " + std::to_string(protocol) +
        ", this client " + std::to_string(kProtocolVersion) +
        ": run the same pmhash version on the node (pmhash-memnode) and the client");
    return in.size();
  }
  if (in.size() < kNodeHelloBytes) return 0;
  std::memcpy(node_hello_.data(), in.data(), kNodeHelloBytes);
  region_size_ = get<std::uint64_t>(in.data() + kHelloSize);
  layout_ = get<std::uint32_t>(in.data() + kHelloLayout);
  const bool node_has_secret = (get<std::uint32_t>(in.data() + kHelloFlags) & kNodeHasSecret) != 0;
  if (secret_ != nullptr && !node_has_secret) {
    *error = Status::InvalidArgument(
        "memory node " + node_ + " runs without a secret while this client has one: it cannot "
        "prove it is the node meant, so it is refused (start it with --secret-file, the same "
        "file as the client's)");
    return kNodeHelloBytes;
  }
  if (!sodium_ready()) {
    *error = Status::IOError("memory node " + node_ + ": libsodium did not start");
    return kNodeHelloBytes;
  }
  char* c = client_hello_.data();
  std::memset(c, 0, kClientHelloBytes);
  put<std::uint32_t>(c, kClientHelloMagic);
  put<std::uint32_t>(c + kClientProtocol, kProtocolVersion);
  ::randombytes_buf(c + kClientNonce, kNonceBytes);
  if (secret_ != nullptr) {
    put<std::uint32_t>(c + kClientFlags, kClientHasProof);
    unsigned char proof[kProofBytes];
    prove(*secret_, kClientLabel, node_hello_, std::span<const char>(c, kClientProof), proof);
    std::memcpy(c + kClientProof, proof, kProofBytes);
  }
  append(out, c, kClientHelloBytes);
  *error = Status::OK();
  return kNodeHelloBytes;
}

std::size_t ClientSide::on_verdict(std::span<const char> in, Status* error) {
  if (in.size() < 4) return 0;
  if (get<std::uint32_t>(in.data()) != kVerdictMagic) {
    *error = Status::IOError("memory node " + node_ + ": no verdict on the hello (protocol error)");
    return in.size();
  }
  const std::size_t n = verdict_size(in, node_, error);
  if (n == 0 || !error->ok()) return n;
  const std::uint32_t status = get<std::uint32_t>(in.data() + kVerdictStatus);
  if (status != 0) {
    *error = status_of(status, "memory node " + node_ + " refused this client: " +
                                   printable(in.data() + kVerdictBytes, n - kVerdictBytes));
    return n;
  }
  if (secret_ != nullptr) {
    unsigned char expected[kProofBytes];
    prove(*secret_, kNodeLabel, node_hello_, client_hello_, expected);
    const bool has = (get<std::uint32_t>(in.data() + kVerdictFlags) & kNodeHasProof) != 0;
    if (!has || !proof_matches(expected, in.data() + kVerdictProof)) {
      *error = Status::InvalidArgument(
          "memory node " + node_ + " did not prove it holds this client's secret (another "
          "secret file, or not the node meant): refused");
      return n;
    }
  }
  *error = Status::OK();
  return n;
}

}  // namespace pmhash::remote::handshake
