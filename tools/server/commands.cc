// server/commands.cc - the Redis commands of pmhash-server (server/commands.h).
#include "server/commands.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <unistd.h>
#include <string>
#include <vector>

#include "pmhash/engines.h"
#include "pmhash/stats.h"
#include "pmhash/store.h"
#include "server/server.h"

namespace pmhash::server {
namespace {

using Args = std::span<const std::string_view>;

// What a command's handler gets.
struct Call {
  Server& server;
  SessionRegistry& sessions;
  Session& session;
  Args args;
  ReplyWriter& out;
};

// Command flags, as COMMAND INFO names them.
enum Flag : unsigned {
  kWrite = 1,
  kReadonly = 2,
  kFast = 4,
  kNoAuth = 8,     // runs before AUTH
  kAdmin = 16,
  kLoading = 32,
  kStale = 64,
};

struct Command {
  std::string_view name;  // lower case
  int arity;
  unsigned flags;
  int first_key;
  int last_key;  // -1: the last argument
  int key_step;
  std::string_view summary;
  void (*run)(Call&);
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool equals_nocase(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool parse_int(std::string_view text, std::int64_t* out) {
  if (text.empty() || text.front() == '+') return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::uint64_t now_us() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// A store error as a Redis error reply.
void store_error(Call& c, const Status& s) {
  c.out.error("ERR " + s.to_string());
}

void wrong_args(Call& c, std::string_view name) {
  c.out.error("ERR wrong number of arguments for '" + lower(name) + "' command");
}

// --- connection ------------------------------------------------------

void cmd_ping(Call& c) {
  if (c.args.size() > 2) return wrong_args(c, "ping");
  if (c.args.size() == 2) return c.out.bulk(c.args[1]);
  c.out.simple("PONG");
}

void cmd_echo(Call& c) { c.out.bulk(c.args[1]); }

void cmd_quit(Call& c) {
  c.out.simple("OK");
  c.session.close_after_reply = true;
}

// AUTH [username] password: one user, "default", as Redis without ACLs.
bool check_password(Call& c, std::string_view user, std::string_view password) {
  const std::string& want = c.server.config().requirepass;
  if (want.empty()) {
    c.out.error(
        "ERR AUTH <password> called without any password configured for the default user. "
        "Are you sure your configuration is correct?");
    return false;
  }
  // Compare every byte whatever the first difference, so that the time a
  // refusal takes says nothing about how much of the password was right.
  unsigned diff = want.size() == password.size() ? 0u : 1u;
  for (std::size_t i = 0; i < password.size(); ++i) {
    diff |= static_cast<unsigned char>(password[i]) ^
            static_cast<unsigned char>(want[i % std::max<std::size_t>(want.size(), 1)]);
  }
  if (user != "default" || diff != 0) {
    c.out.error("WRONGPASS invalid username-password pair or user is disabled.");
    return false;
  }
  c.session.authenticated = true;
  return true;
}

void cmd_auth(Call& c) {
  if (c.args.size() > 3) return c.out.error("ERR syntax error");
  const std::string_view user = c.args.size() == 3 ? c.args[1] : std::string_view("default");
  if (check_password(c, user, c.args.back())) c.out.simple("OK");
}

// HELLO [protover [AUTH username password] [SETNAME clientname]]
void cmd_hello(Call& c) {
  Protocol proto = c.session.protocol;
  std::size_t i = 1;
  if (c.args.size() > 1) {
    std::int64_t v = 0;
    if (!parse_int(c.args[1], &v)) {
      return c.out.error("ERR Protocol version is not an integer or out of range");
    }
    if (v != 2 && v != 3) return c.out.error("NOPROTO unsupported protocol version");
    proto = v == 3 ? Protocol::kResp3 : Protocol::kResp2;
    i = 2;
  }
  std::string name = c.session.name;
  for (; i < c.args.size(); ++i) {
    if (equals_nocase(c.args[i], "AUTH") && i + 2 < c.args.size()) {
      if (!check_password(c, c.args[i + 1], c.args[i + 2])) return;
      i += 2;
    } else if (equals_nocase(c.args[i], "SETNAME") && i + 1 < c.args.size()) {
      name = std::string(c.args[++i]);
    } else {
      return c.out.error("ERR Syntax error in HELLO option '" + std::string(c.args[i]) + "'");
    }
  }
  if (!c.session.authenticated) {
    return c.out.error("NOAUTH HELLO must be called with the client already authenticated, "
                       "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                       "authenticate the client and select the RESP protocol version at the same "
                       "time");
  }
  c.sessions.set_identity(c.session, name, proto);
  c.out.set_protocol(proto);
  c.out.map(7);
  c.out.bulk("server");
  c.out.bulk("redis");
  c.out.bulk("version");
  c.out.bulk("7.2.0");
  c.out.bulk("proto");
  c.out.integer(proto == Protocol::kResp3 ? 3 : 2);
  c.out.bulk("id");
  c.out.integer(static_cast<std::int64_t>(c.session.id));
  c.out.bulk("mode");
  c.out.bulk("standalone");
  c.out.bulk("role");
  c.out.bulk("master");
  c.out.bulk("modules");
  c.out.array(0);
}

void cmd_select(Call& c) {
  std::int64_t db = 0;
  if (!parse_int(c.args[1], &db)) return c.out.error("ERR value is not an integer or out of range");
  if (db != 0) return c.out.error("ERR DB index is out of range");
  c.out.simple("OK");
}

// --- strings -----------------------------------------------------------

void cmd_get(Call& c) {
  std::string value;
  const Status s = c.server.store().get(c.args[1], &value);
  if (s.is_not_found()) return c.out.null();
  if (!s.ok()) return store_error(c, s);
  c.out.bulk(value);
}

// SET key value [NX | XX]: NX is the store's insert and XX its update, each
// atomic on every engine. GET, EX, PX, EXAT, PXAT and KEEPTTL need the
// store's read-modify-write and expiry, which this server does not offer
// yet: they are refused, never emulated.
void cmd_set(Call& c) {
  bool nx = false;
  bool xx = false;
  for (std::size_t i = 3; i < c.args.size(); ++i) {
    const std::string opt = lower(c.args[i]);
    if (opt == "nx" && !xx) {
      nx = true;
    } else if (opt == "xx" && !nx) {
      xx = true;
    } else if (opt == "get" || opt == "ex" || opt == "px" || opt == "exat" || opt == "pxat" ||
               opt == "keepttl") {
      return c.out.error("ERR SET " + std::string(c.args[i]) +
                         " is not supported by pmhash-server yet");
    } else {
      return c.out.error("ERR syntax error");
    }
  }
  Store& store = c.server.store();
  Status s;
  if (nx) {
    s = store.insert(c.args[1], c.args[2]);
    if (s.is_already_exists()) return c.out.null();
  } else if (xx) {
    s = store.update(c.args[1], c.args[2]);
    if (s.is_not_found()) return c.out.null();
  } else {
    s = store.upsert(c.args[1], c.args[2]);
  }
  if (!s.ok()) return store_error(c, s);
  c.out.simple("OK");
}

void cmd_setnx(Call& c) {
  const Status s = c.server.store().insert(c.args[1], c.args[2]);
  if (s.is_already_exists()) return c.out.integer(0);
  if (!s.ok()) return store_error(c, s);
  c.out.integer(1);
}

void cmd_strlen(Call& c) {
  std::string value;
  const Status s = c.server.store().get(c.args[1], &value);
  if (s.is_not_found()) return c.out.integer(0);
  if (!s.ok()) return store_error(c, s);
  c.out.integer(static_cast<std::int64_t>(value.size()));
}

void cmd_mget(Call& c) {
  c.out.array(c.args.size() - 1);
  std::string value;
  for (std::size_t i = 1; i < c.args.size(); ++i) {
    const Status s = c.server.store().get(c.args[i], &value);
    if (s.ok()) {
      c.out.bulk(value);
    } else {
      // Redis answers nil for a key it cannot give, whatever the reason.
      c.out.null();
    }
  }
}

// --- keys ----------------------------------------------------------------

void cmd_del(Call& c) {
  std::int64_t removed = 0;
  for (std::size_t i = 1; i < c.args.size(); ++i) {
    const Status s = c.server.store().remove(c.args[i]);
    if (s.ok()) {
      ++removed;
    } else if (!s.is_not_found()) {
      return store_error(c, s);
    }
  }
  c.out.integer(removed);
}

void cmd_exists(Call& c) {
  std::int64_t found = 0;
  std::string value;
  for (std::size_t i = 1; i < c.args.size(); ++i) {
    const Status s = c.server.store().get(c.args[i], &value);
    if (s.ok()) {
      ++found;
    } else if (!s.is_not_found()) {
      return store_error(c, s);
    }
  }
  c.out.integer(found);
}

void cmd_type(Call& c) {
  std::string value;
  const Status s = c.server.store().get(c.args[1], &value);
  if (s.is_not_found()) return c.out.simple("none");
  if (!s.ok()) return store_error(c, s);
  c.out.simple("string");
}

void cmd_dbsize(Call& c) { c.out.integer(static_cast<std::int64_t>(c.server.store().size())); }

void cmd_keys(Call& c) {
  std::vector<std::string> keys;
  const std::string_view pattern = c.args[1];
  const Status s = c.server.store().for_each([&](std::string_view key, std::string_view) {
    if (glob_match(pattern, key)) keys.emplace_back(key);
    return true;
  });
  if (!s.ok()) return store_error(c, s);
  c.out.array(keys.size());
  for (const std::string& k : keys) c.out.bulk(k);
}

// --- server ----------------------------------------------------------------

void cmd_time(Call& c) {
  const std::uint64_t us = now_us();
  c.out.array(2);
  c.out.bulk(std::to_string(us / 1000000));
  c.out.bulk(std::to_string(us % 1000000));
}

// SAVE and BGSAVE make every acknowledged write durable (Store::sync):
// with strict durability that is already so; with epochs (dali) it ends the
// current epoch and waits for it.
void save(Call& c, std::string_view ok) {
  const Status s = c.server.store().sync();
  if (!s.ok()) return store_error(c, s);
  c.server.last_save_unix().store(now_us() / 1000000, std::memory_order_relaxed);
  c.out.simple(ok);
}

void cmd_save(Call& c) { save(c, "OK"); }
void cmd_bgsave(Call& c) { save(c, "Background saving started"); }

void cmd_lastsave(Call& c) {
  c.out.integer(static_cast<std::int64_t>(c.server.last_save_unix().load(std::memory_order_relaxed)));
}

// No replicas: nothing to wait for.
void cmd_wait(Call& c) {
  std::int64_t v = 0;
  if (!parse_int(c.args[1], &v) || !parse_int(c.args[2], &v)) {
    return c.out.error("ERR value is not an integer or out of range");
  }
  c.out.integer(0);
}

// SHUTDOWN [NOSAVE | SAVE]: the server stops; the store is closed cleanly
// (every write durable) in either case, so the options change nothing.
void cmd_shutdown(Call& c) {
  for (std::size_t i = 1; i < c.args.size(); ++i) {
    const std::string opt = lower(c.args[i]);
    if (opt != "nosave" && opt != "save" && opt != "now" && opt != "force") {
      return c.out.error("ERR syntax error");
    }
  }
  c.server.stop();
  // Redis sends no reply to a successful SHUTDOWN: the connection closes.
  c.session.close_after_reply = true;
}

void cmd_client(Call& c) {
  const std::string sub = lower(c.args[1]);
  if (sub == "id" && c.args.size() == 2) return c.out.integer(static_cast<std::int64_t>(c.session.id));
  if (sub == "getname" && c.args.size() == 2) {
    if (c.session.name.empty()) return c.out.null();
    return c.out.bulk(c.session.name);
  }
  if (sub == "setname" && c.args.size() == 3) {
    for (char ch : c.args[2]) {
      if (ch < '!' || ch > '~') {
        return c.out.error("ERR Client names cannot contain spaces, newlines or special characters.");
      }
    }
    c.sessions.set_identity(c.session, std::string(c.args[2]), c.session.protocol);
    return c.out.simple("OK");
  }
  if (sub == "list" && c.args.size() == 2) {
    return c.out.verbatim("txt", c.sessions.list());
  }
  if (sub == "info" && c.args.size() == 2) {
    return c.out.verbatim("txt", SessionRegistry::describe(c.session) + " cmd=client|info\n");
  }
  c.out.error("ERR unknown subcommand or wrong number of arguments for '" + std::string(c.args[1]) +
              "'. Try CLIENT HELP.");
}

std::string info_text(Call& c, std::string_view section);

void cmd_info(Call& c) {
  const std::string section = c.args.size() > 1 ? lower(c.args[1]) : std::string("default");
  c.out.verbatim("txt", info_text(c, section));
}

void cmd_command(Call& c);

// CONFIG GET pattern...: what applies of Redis's parameters, and pmhash's
// own, from the configuration the server started with. The server takes
// its configuration at start only: CONFIG SET changes nothing.
void cmd_config(Call& c) {
  const std::string sub = lower(c.args[1]);
  const ServerConfig& cfg = c.server.config();
  if (sub == "get" && c.args.size() >= 3) {
    const Stats st = c.server.store().stats();
    const std::pair<std::string_view, std::string> params[] = {
        {"bind", cfg.bind},
        {"port", std::to_string(c.server.port())},
        {"maxclients", std::to_string(cfg.max_clients)},
        {"requirepass", cfg.requirepass},
        {"databases", "1"},
        {"save", ""},
        {"appendonly", "no"},
        {"timeout", "0"},
        {"io-threads", std::to_string(cfg.workers)},
        {"proto-max-bulk-len", std::to_string(cfg.limits.max_bulk)},
        {"client-query-buffer-limit", std::to_string(cfg.limits.max_request)},
        {"maxmemory", "0"},
        {"pmhash-engine", st.engine},
        {"pmhash-durability", cfg.durability},
        {"pmhash-pool-size", std::to_string(st.pool_size)},
    };
    std::vector<const std::pair<std::string_view, std::string>*> hits;
    for (const auto& p : params) {
      for (std::size_t i = 2; i < c.args.size(); ++i) {
        if (glob_match(c.args[i], p.first, /*nocase=*/true)) {
          hits.push_back(&p);
          break;
        }
      }
    }
    c.out.map(hits.size());
    for (const auto* p : hits) {
      c.out.bulk(p->first);
      c.out.bulk(p->second);
    }
    return;
  }
  if (sub == "set" && c.args.size() >= 4) {
    return c.out.error("ERR CONFIG SET " + std::string(c.args[2]) +
                       ": pmhash-server takes its configuration at start (pmhash-server --help)");
  }
  if (sub == "resetstat" && c.args.size() == 2) {
    ServerCounters& n = c.server.counters();
    for (auto* counter : {&n.connections_received, &n.connections_rejected, &n.commands, &n.protocol_errors,
                          &n.output_limit_closes, &n.output_pauses, &n.output_high_water, &n.bytes_in,
                          &n.bytes_out}) {
      counter->store(0, std::memory_order_relaxed);
    }
    return c.out.simple("OK");
  }
  c.out.error("ERR unknown subcommand or wrong number of arguments for '" + std::string(c.args[1]) +
              "'. Try CONFIG HELP.");
}

const Command kCommands[] = {
    {"auth", -2, kNoAuth | kFast | kStale | kLoading, 0, 0, 0, "Authenticates the connection.", cmd_auth},
    {"bgsave", -1, kAdmin, 0, 0, 0, "Makes every acknowledged write durable.", cmd_bgsave},
    {"client", -2, kAdmin | kStale | kLoading, 0, 0, 0, "Connection commands.", cmd_client},
    {"config", -2, kAdmin | kStale | kLoading, 0, 0, 0, "The server's configuration.", cmd_config},
    {"command", -1, kLoading | kStale, 0, 0, 0, "Details about the commands.", cmd_command},
    {"dbsize", 1, kReadonly | kFast, 0, 0, 0, "The number of keys.", cmd_dbsize},
    {"del", -2, kWrite, 1, -1, 1, "Deletes keys.", cmd_del},
    {"echo", 2, kFast, 0, 0, 0, "Returns the given string.", cmd_echo},
    {"exists", -2, kReadonly | kFast, 1, -1, 1, "How many of the keys exist.", cmd_exists},
    {"get", 2, kReadonly | kFast, 1, 1, 1, "The value of a key.", cmd_get},
    {"hello", -1, kNoAuth | kFast | kStale | kLoading, 0, 0, 0, "Handshake: protocol version, authentication, name.", cmd_hello},
    {"info", -1, kLoading | kStale, 0, 0, 0, "Information and counters about the server and its store.", cmd_info},
    {"keys", 2, kReadonly, 0, 0, 0, "Every key matching a pattern.", cmd_keys},
    {"lastsave", 1, kFast | kLoading | kStale, 0, 0, 0, "When SAVE or BGSAVE last succeeded.", cmd_lastsave},
    {"mget", -2, kReadonly | kFast, 1, -1, 1, "The values of keys.", cmd_mget},
    {"ping", -1, kFast | kStale, 0, 0, 0, "Answers PONG, or the given string.", cmd_ping},
    {"quit", -1, kNoAuth | kFast | kStale | kLoading, 0, 0, 0, "Closes the connection.", cmd_quit},
    {"save", 1, kAdmin, 0, 0, 0, "Makes every acknowledged write durable.", cmd_save},
    {"select", 2, kLoading | kStale | kFast, 0, 0, 0, "Selects database 0 (the only one).", cmd_select},
    {"set", -3, kWrite, 1, 1, 1, "Sets a key's value.", cmd_set},
    {"setnx", 3, kWrite | kFast, 1, 1, 1, "Sets a key's value if the key does not exist.", cmd_setnx},
    {"shutdown", -1, kAdmin | kLoading | kStale, 0, 0, 0, "Stops the server; the store closes cleanly.", cmd_shutdown},
    {"strlen", 2, kReadonly | kFast, 1, 1, 1, "The length of a key's value.", cmd_strlen},
    {"time", 1, kFast | kLoading | kStale, 0, 0, 0, "The server's time.", cmd_time},
    {"type", 2, kReadonly | kFast, 1, 1, 1, "The type of a key's value: string, or none.", cmd_type},
    {"unlink", -2, kWrite | kFast, 1, -1, 1, "Deletes keys.", cmd_del},
    {"wait", 3, 0, 0, 0, 0, "Waits for replicas: there are none.", cmd_wait},
};

const Command* find_command(std::string_view name) {
  for (const Command& cmd : kCommands) {
    if (equals_nocase(cmd.name, name)) return &cmd;
  }
  return nullptr;
}

void command_info(ReplyWriter& out, const Command& cmd) {
  std::vector<std::string_view> flags;
  if (cmd.flags & kWrite) flags.push_back("write");
  if (cmd.flags & kReadonly) flags.push_back("readonly");
  if (cmd.flags & kAdmin) flags.push_back("admin");
  if (cmd.flags & kNoAuth) flags.push_back("no_auth");
  if (cmd.flags & kLoading) flags.push_back("loading");
  if (cmd.flags & kStale) flags.push_back("stale");
  if (cmd.flags & kFast) flags.push_back("fast");
  out.array(6);
  out.bulk(cmd.name);
  out.integer(cmd.arity);
  out.set(flags.size());
  for (std::string_view f : flags) out.simple(f);
  out.integer(cmd.first_key);
  out.integer(cmd.last_key);
  out.integer(cmd.key_step);
}

// COMMAND, COMMAND COUNT, COMMAND INFO name..., COMMAND DOCS [name...]
void cmd_command(Call& c) {
  const std::size_t total = std::size(kCommands);
  if (c.args.size() == 1) {
    c.out.array(total);
    for (const Command& cmd : kCommands) command_info(c.out, cmd);
    return;
  }
  const std::string sub = lower(c.args[1]);
  if (sub == "count" && c.args.size() == 2) return c.out.integer(static_cast<std::int64_t>(total));
  if (sub == "info") {
    if (c.args.size() == 2) {
      c.out.array(total);
      for (const Command& cmd : kCommands) command_info(c.out, cmd);
      return;
    }
    c.out.array(c.args.size() - 2);
    for (std::size_t i = 2; i < c.args.size(); ++i) {
      const Command* cmd = find_command(c.args[i]);
      if (cmd == nullptr) {
        c.out.null_array();
      } else {
        command_info(c.out, *cmd);
      }
    }
    return;
  }
  if (sub == "docs") {
    std::vector<const Command*> list;
    if (c.args.size() == 2) {
      for (const Command& cmd : kCommands) list.push_back(&cmd);
    } else {
      for (std::size_t i = 2; i < c.args.size(); ++i) {
        if (const Command* cmd = find_command(c.args[i])) list.push_back(cmd);
      }
    }
    c.out.map(list.size());
    for (const Command* cmd : list) {
      c.out.bulk(cmd->name);
      c.out.map(2);
      c.out.bulk("summary");
      c.out.bulk(cmd->summary);
      c.out.bulk("group");
      c.out.bulk((cmd->flags & kAdmin) != 0 ? "server" : "generic");
    }
    return;
  }
  c.out.error("ERR unknown subcommand or wrong number of arguments for '" + std::string(c.args[1]) +
              "'. Try COMMAND HELP.");
}

// INFO's sections, each "# Name" then "field:value" lines, as Redis's.
std::string info_text(Call& c, std::string_view section) {
  const bool all = section == "all" || section == "everything" || section == "default";
  const Stats st = c.server.store().stats();
  ServerCounters& n = c.server.counters();
  std::string out;
  auto field = [&out](std::string_view name, const std::string& value) {
    out.append(name).append(":").append(value).append("\r\n");
  };
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  const std::uint64_t now = now_us() / 1000000;
  if (all || section == "server") {
    out += "# Server\r\n";
    field("redis_version", "7.2.0");
    field("redis_mode", "standalone");
    field("pmhash_server", "1");
    field("process_id", num(static_cast<std::uint64_t>(::getpid())));
    field("tcp_port", num(c.server.port()));
    field("uptime_in_seconds", num(now - c.server.started_unix()));
    out += "\r\n";
  }
  if (all || section == "clients") {
    out += "# Clients\r\n";
    field("connected_clients", num(n.connected.load()));
    field("blocked_clients", "0");
    field("maxclients", num(c.server.config().max_clients));
    out += "\r\n";
  }
  if (all || section == "memory") {
    out += "# Memory\r\n";
    field("used_memory", num(st.heap_used));
    field("pmhash_pool_size", num(st.pool_size));
    field("pmhash_heap_free", num(st.heap_free));
    field("pmhash_dram_bytes", num(st.dram_bytes));
    out += "\r\n";
  }
  if (all || section == "persistence") {
    out += "# Persistence\r\n";
    field("loading", "0");
    field("pmhash_engine", st.engine);
    field("pmhash_durability", c.server.config().durability);
    field("pmhash_granularity", st.granularity);
    field("pmhash_clean_shutdown", st.clean_shutdown ? "1" : "0");
    field("pmhash_recovery_us", num(st.recovery_ns / 1000));
    field("pmhash_open_us", num(st.open_ns / 1000));
    field("rdb_last_save_time", num(c.server.last_save_unix().load()));
    field("aof_enabled", "0");
    out += "\r\n";
  }
  if (all || section == "stats") {
    out += "# Stats\r\n";
    field("total_connections_received", num(n.connections_received.load()));
    field("total_commands_processed", num(n.commands.load()));
    field("rejected_connections", num(n.connections_rejected.load()));
    field("total_net_input_bytes", num(n.bytes_in.load()));
    field("total_net_output_bytes", num(n.bytes_out.load()));
    field("client_output_buffer_limit_disconnections", num(n.output_limit_closes.load()));
    field("total_error_replies", num(n.protocol_errors.load()));
    field("pmhash_flushes", num(st.flushes));
    field("pmhash_fences", num(st.fences));
    out += "\r\n";
  }
  // The engine's named properties (its descriptor documents each), with
  // the dots of their names as underscores, as INFO fields are written.
  if (all || section == "pmhash") {
    out += "# Pmhash\r\n";
    for (const Property& p : st.properties) {
      std::string name = p.name;
      for (char& ch : name) {
        if (ch == '.') ch = '_';
      }
      field(name, num(p.value));
    }
    out += "\r\n";
  }
  if (all || section == "keyspace") {
    out += "# Keyspace\r\n";
    if (st.items != 0) field("db0", "keys=" + num(st.items) + ",expires=0,avg_ttl=0");
    out += "\r\n";
  }
  if (out.size() >= 2) out.resize(out.size() - 2);  // no blank line after the last section
  return out;
}

}  // namespace

void SessionRegistry::add(Session* s) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_[s->id] = s;
}

void SessionRegistry::remove(Session* s) {
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.erase(s->id);
}

void SessionRegistry::set_identity(Session& s, std::string name, Protocol protocol) {
  std::lock_guard<std::mutex> lock(mu_);
  s.name = std::move(name);
  s.protocol = protocol;
}

std::string SessionRegistry::describe(const Session& s) {
  const std::uint64_t now = now_us() / 1000000;
  return "id=" + std::to_string(s.id) + " addr=" + s.address + " name=" + s.name +
         " age=" + std::to_string(now - std::min(now, s.connected_unix)) + " db=0 resp=" +
         (s.protocol == Protocol::kResp3 ? "3" : "2");
}

std::string SessionRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Session*> all;
  for (const auto& [id, s] : sessions_) all.push_back(s);
  std::sort(all.begin(), all.end(), [](const Session* a, const Session* b) { return a->id < b->id; });
  std::string out;
  for (const Session* s : all) out += describe(*s) + "\n";
  return out;
}

void execute(Server& server, SessionRegistry& sessions, Session& session, Args args,
             ReplyWriter& out) {
  Call call{server, sessions, session, args, out};
  const Command* cmd = find_command(args[0]);
  if (cmd == nullptr) {
    std::string text = "ERR unknown command '" + std::string(args[0]) + "', with args beginning with: ";
    for (std::size_t i = 1; i < args.size() && text.size() < 256; ++i) {
      text += "'" + std::string(args[i].substr(0, 64)) + "' ";
    }
    return out.error(text);
  }
  if (!session.authenticated && (cmd->flags & kNoAuth) == 0) {
    return out.error("NOAUTH Authentication required.");
  }
  const auto n = static_cast<std::int64_t>(args.size());
  if ((cmd->arity > 0 && n != cmd->arity) || (cmd->arity < 0 && n < -cmd->arity)) {
    return wrong_args(call, cmd->name);
  }
  cmd->run(call);
}

// Redis's glob: '*' any run, '?' any byte, '[...]' a class with ranges and
// a leading '^' to negate, '\' escapes the next byte. Iterative, with one
// back-track point for the last '*', so a hostile pattern costs
// O(pattern * text), never exponential time.
bool glob_match(std::string_view p, std::string_view t, bool nocase) {
  auto fold = [nocase](char ch) {
    return nocase ? static_cast<char>(std::tolower(static_cast<unsigned char>(ch))) : ch;
  };
  // Whether the single-byte element of the pattern at p[pi] matches ch;
  // *next is set past the element. False for a malformed class end.
  auto element = [&](std::size_t pi, char ch, std::size_t* next) {
    if (p[pi] == '?') {
      *next = pi + 1;
      return true;
    }
    if (p[pi] == '\\' && pi + 1 < p.size()) {
      *next = pi + 2;
      return fold(p[pi + 1]) == fold(ch);
    }
    if (p[pi] == '[') {
      std::size_t i = pi + 1;
      bool negate = false;
      if (i < p.size() && p[i] == '^') {
        negate = true;
        ++i;
      }
      bool match = false;
      while (i < p.size() && p[i] != ']') {
        if (p[i] == '\\' && i + 1 < p.size()) {
          if (fold(p[i + 1]) == fold(ch)) match = true;
          i += 2;
        } else if (i + 2 < p.size() && p[i + 1] == '-' && p[i + 2] != ']') {
          char lo = fold(p[i]);
          char hi = fold(p[i + 2]);
          if (lo > hi) std::swap(lo, hi);
          if (fold(ch) >= lo && fold(ch) <= hi) match = true;
          i += 3;
        } else {
          if (fold(p[i]) == fold(ch)) match = true;
          ++i;
        }
      }
      // An unclosed class runs to the pattern's end, as in Redis.
      *next = i < p.size() ? i + 1 : i;
      return match != negate;
    }
    *next = pi + 1;
    return fold(p[pi]) == fold(ch);
  };
  std::size_t pi = 0;
  std::size_t ti = 0;
  std::size_t star_p = std::string_view::npos;
  std::size_t star_t = 0;
  while (ti < t.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star_p = ++pi;
      star_t = ti;
      continue;
    }
    std::size_t next = 0;
    if (pi < p.size() && element(pi, t[ti], &next)) {
      pi = next;
      ++ti;
      continue;
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p;
    ti = ++star_t;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

}  // namespace pmhash::server
