// remote/net.h - the socket helpers of the tcp transport and the daemon.
#pragma once

#include <cstdint>
#include <string>

#include "pmhash/status.h"

namespace pmhash::remote::net {

// Splits "HOST:PORT" (HOST a name or an IPv4 address). InvalidArgument
// naming `spec` if it is not of that form.
Status split_address(const std::string& spec, std::string* host, std::uint16_t* port);

// The IPv4 address of `host` (a dotted quad or a name getaddrinfo knows).
Status resolve(const std::string& host, std::uint32_t* addr_be);

// Sets O_NONBLOCK; false on failure (errno set).
bool set_nonblocking(int fd);

std::string errno_text(int err);

}  // namespace pmhash::remote::net
