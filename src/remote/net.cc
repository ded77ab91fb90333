#include "remote/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>

#include <charconv>
#include <cstring>

namespace pmhash::remote::net {

Status split_address(const std::string& spec, std::string* host, std::uint16_t* port) {
  const auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
    return Status::InvalidArgument("address '" + spec + "': expected HOST:PORT");
  }
  unsigned value = 0;
  const char* first = spec.data() + colon + 1;
  const char* last = spec.data() + spec.size();
  const auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last || value > 65535) {
    return Status::InvalidArgument("address '" + spec + "': the port must be 0..65535");
  }
  *host = spec.substr(0, colon);
  *port = static_cast<std::uint16_t>(value);
  return Status::OK();
}

Status resolve(const std::string& host, std::uint32_t* addr_be) {
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) == 1) {
    *addr_be = a.s_addr;
    return Status::OK();
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status::InvalidArgument("host '" + host + "': " + ::gai_strerror(rc));
  }
  *addr_be = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr.s_addr;
  ::freeaddrinfo(res);
  return Status::OK();
}

bool set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace pmhash::remote::net
