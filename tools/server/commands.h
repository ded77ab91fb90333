// server/commands.h - the Redis commands pmhash-server runs, each against
// the Store API.
//
// A command is one row of a table: its name, its arity (Redis's
// convention: n > 0 exactly n words with the name, n < 0 at least -n), its
// flags and its key positions (what COMMAND INFO reports, and what
// clients and proxies read to route it), and the function that runs it.
// Replies and errors follow Redis's for the same input, so a client cannot
// tell the difference except where the server says so in an error.
//
// Strings only: every value is a Redis string, so TYPE answers "string" or
// "none" and no command ever answers -WRONGTYPE. One database: SELECT 0
// only.
//
// What a command promises about durability is the store's: with strict
// durability a reply is sent only after the write it reports is durable.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/resp.h"

namespace pmhash::server {

class Server;

// One connection's state the commands see and change. Only the worker that
// owns the connection writes it; name and protocol, which CLIENT LIST reads
// from other workers, change under the registry's lock (set_identity).
struct Session {
  std::uint64_t id = 0;
  std::string address;  // "ip:port" of the peer
  std::string name;     // CLIENT SETNAME
  std::uint64_t connected_unix = 0;
  bool authenticated = false;
  Protocol protocol = Protocol::kResp2;
  // Set by a command: send the replies so far, then close (QUIT).
  bool close_after_reply = false;

  // MULTI ... EXEC (docs/server.md, "Transactions"): whether MULTI is open,
  // the requests queued since (each its words), their bytes, and whether
  // one was refused while queuing (EXEC then answers -EXECABORT).
  bool in_multi = false;
  bool multi_refused = false;
  // MULTI was refused (no transactions): until EXEC or DISCARD every
  // request is refused, so that a pipelined block runs nothing.
  bool multi_unsupported = false;
  std::vector<std::vector<std::string>> queued;
  std::uint64_t queued_bytes = 0;
  // WATCH: each watched key with the stored bytes it held when watched
  // (nullopt: absent), and their bytes.
  std::vector<std::pair<std::string, std::optional<std::string>>> watched;
  std::uint64_t watched_bytes = 0;

  void end_multi() {
    in_multi = false;
    multi_refused = false;
    multi_unsupported = false;
    queued.clear();
    queued.shrink_to_fit();
    queued_bytes = 0;
    watched.clear();
    watched.shrink_to_fit();
    watched_bytes = 0;
  }
};

// The sessions of every worker, for CLIENT LIST.
class SessionRegistry {
 public:
  void add(Session* s);
  void remove(Session* s);
  // Sets a session's name and protocol (CLIENT SETNAME, HELLO).
  void set_identity(Session& s, std::string name, Protocol protocol);
  // One line per session, CLIENT LIST's format, under the registry's lock.
  std::string list() const;
  // One session's line; the caller holds the lock or owns the session.
  static std::string describe(const Session& s);

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, Session*> sessions_;
};

// Runs one request. `args` is the request (args[0] the command name, any
// case); the reply (or error) is appended through `out`.
void execute(Server& server, SessionRegistry& sessions, Session& session,
             std::span<const std::string_view> args, ReplyWriter& out);

// Redis's glob-style pattern (KEYS, SCAN MATCH, CONFIG GET): * ? [abc]
// [^a-z] and \ to escape.
bool glob_match(std::string_view pattern, std::string_view text, bool nocase = false);

}  // namespace pmhash::server
