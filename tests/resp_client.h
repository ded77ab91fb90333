// tests/resp_client.h - a minimal blocking Redis-protocol client for the
// server's tests: sends raw bytes or commands and reads one reply at a
// time, rendered as text so that a test compares it with what the
// protocol specifies.
//
// Rendering: +OK -> "OK", -ERR x -> "(error) ERR x", :5 -> "(integer) 5",
// $3 abc -> "abc", nulls -> "(nil)", aggregates -> "[a, b]" (maps and sets
// too, RESP3 maps as "{k: v}"), ,1.5 -> "(double) 1.5", #t -> "(true)",
// =txt -> its text. A closed connection reads as "(closed)", a reply not
// complete within the timeout as "(timeout)".
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pmhash::test {

class RespClient {
 public:
  // Connects to 127.0.0.1:port; ok() tells whether it did.
  explicit RespClient(std::uint16_t port, int timeout_ms = 20000) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RespClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RespClient(const RespClient&) = delete;
  RespClient& operator=(const RespClient&) = delete;

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  static std::string encode(const std::vector<std::string>& args) {
    std::string out = "*" + std::to_string(args.size()) + "\r\n";
    for (const std::string& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    return out;
  }

  bool send_raw(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t w = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(w));
    }
    return true;
  }

  // Sends one command and reads its reply.
  std::string call(const std::vector<std::string>& args) {
    if (!send_raw(encode(args))) return "(send failed)";
    return reply();
  }

  // Reads one reply.
  std::string reply() {
    std::string out;
    if (!read_value(&out)) return status_;
    return out;
  }

  // True when the server closed the connection (reads end of input).
  bool closed_by_server() {
    char c;
    for (;;) {
      if (pos_ < buf_.size()) return false;
      const ssize_t r = ::recv(fd_, &c, 1, 0);
      if (r == 0) return true;
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return errno == ECONNRESET;
      buf_.push_back(c);
    }
  }

 private:
  bool fill(std::size_t need) {
    while (buf_.size() - pos_ < need) {
      char tmp[65536];
      const ssize_t r = ::recv(fd_, tmp, sizeof(tmp), 0);
      if (r > 0) {
        buf_.append(tmp, static_cast<std::size_t>(r));
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      status_ = r == 0 || errno == ECONNRESET ? "(closed)" : "(timeout)";
      return false;
    }
    return true;
  }

  bool read_line(std::string* line) {
    for (;;) {
      const std::size_t nl = buf_.find("\r\n", pos_);
      if (nl != std::string::npos) {
        *line = buf_.substr(pos_, nl - pos_);
        pos_ = nl + 2;
        if (pos_ > (1u << 20)) {
          buf_.erase(0, pos_);
          pos_ = 0;
        }
        return true;
      }
      if (!fill(buf_.size() - pos_ + 1)) return false;
    }
  }

  bool read_value(std::string* out) {
    std::string line;
    if (!read_line(&line) || line.empty()) return false;
    const char type = line[0];
    const std::string rest = line.substr(1);
    switch (type) {
      case '+': *out = rest; return true;
      case '-': *out = "(error) " + rest; return true;
      case ':': *out = "(integer) " + rest; return true;
      case ',': *out = "(double) " + rest; return true;
      case '#': *out = rest == "t" ? "(true)" : "(false)"; return true;
      case '_': *out = "(nil)"; return true;
      case '$':
      case '=': {
        const long long n = std::stoll(rest);
        if (n < 0) {
          *out = "(nil)";
          return true;
        }
        if (!fill(static_cast<std::size_t>(n) + 2)) return false;
        *out = buf_.substr(pos_, static_cast<std::size_t>(n));
        pos_ += static_cast<std::size_t>(n) + 2;
        if (type == '=' && out->size() >= 4) out->erase(0, 4);  // "txt:"
        return true;
      }
      case '*':
      case '~':
      case '%': {
        const long long n = std::stoll(rest);
        if (n < 0) {
          *out = "(nil)";
          return true;
        }
        const bool map = type == '%';
        *out = map ? "{" : "[";
        for (long long i = 0; i < n; ++i) {
          std::string v;
          if (!read_value(&v)) return false;
          if (i > 0) *out += ", ";
          *out += v;
          if (map) {
            if (!read_value(&v)) return false;
            *out += ": " + v;
          }
        }
        *out += map ? "}" : "]";
        return true;
      }
      default:
        status_ = "(bad reply type " + std::string(1, type) + ")";
        return false;
    }
  }

  int fd_ = -1;
  std::string buf_;
  std::size_t pos_ = 0;
  std::string status_;
};

}  // namespace pmhash::test
