// server/commands.cc - the Redis commands of pmhash-server (server/commands.h).
#include "server/commands.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unistd.h>
#include <string>
#include <vector>

#include "pmhash/engines.h"
#include "pmhash/stats.h"
#include "pmhash/store.h"
#include "pmhash/transaction.h"
#include "server/keyspace.h"
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
  // Where the command's key operations go: the keyspace, or under EXEC the
  // transaction's TxnKeys.
  KeyOps& keys;
  // Under EXEC: the store transaction every key operation runs in, and the
  // first store error that ends it (the whole transaction then fails or,
  // for Aborted, runs again).
  Transaction* txn = nullptr;
  Status txn_failure;
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
  kNoMulti = 128,  // refused between MULTI and EXEC (cannot run in a store transaction)
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
  // Under EXEC a store error other than a refused argument ends the
  // transaction: nothing of it may apply (cmd_exec).
  if (c.txn != nullptr && c.txn_failure.ok() && !s.is_invalid_argument()) c.txn_failure = s;
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
//
// Every value may carry an expiry deadline (server/keyspace.h). A command
// that reads and writes a key runs as one Keyspace::modify, atomic on every
// engine; its function may run more than once, so it only records what it
// saw in locals the reply is made from after the call.

constexpr std::string_view kNotInteger = "ERR value is not an integer or out of range";

std::string expire_error(std::string_view command) {
  return "ERR invalid expire time in '" + lower(command) + "' command";
}

// The deadline (ms since the epoch) of an expiry given in `unit` (EX, PX,
// EXAT, PXAT, lower case) with the amount `text`; false with the error in
// *error when the amount is not a positive integer or the deadline
// overflows.
bool deadline_of(Call& c, std::string_view unit, std::string_view text, std::string_view command,
                 std::uint64_t* deadline, std::string* error) {
  std::int64_t n = 0;
  if (!parse_int(text, &n)) {
    *error = std::string(kNotInteger);
    return false;
  }
  if (n <= 0) {
    *error = expire_error(command);
    return false;
  }
  const std::uint64_t now = c.keys.now_ms();
  const std::uint64_t amount = static_cast<std::uint64_t>(n);
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(INT64_MAX);
  const bool seconds = unit == "ex" || unit == "exat";
  const bool relative = unit == "ex" || unit == "px";
  if (seconds && amount > kMax / 1000) {
    *error = expire_error(command);
    return false;
  }
  const std::uint64_t ms = seconds ? amount * 1000 : amount;
  if (relative && ms > kMax - now) {
    *error = expire_error(command);
    return false;
  }
  *deadline = relative ? now + ms : ms;
  return true;
}

bool is_expiry_unit(std::string_view opt) {
  return opt == "ex" || opt == "px" || opt == "exat" || opt == "pxat";
}

void cmd_get(Call& c) {
  Entry e;
  const Status s = c.keys.get(c.args[1], &e);
  if (s.is_not_found()) return c.out.null();
  if (!s.ok()) return store_error(c, s);
  c.out.bulk(e.value);
}

// SET key value [NX | XX] [GET] [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL]
void cmd_set(Call& c) {
  bool nx = false;
  bool xx = false;
  bool get = false;
  bool keepttl = false;
  bool expiry = false;
  std::uint64_t deadline = 0;
  for (std::size_t i = 3; i < c.args.size(); ++i) {
    const std::string opt = lower(c.args[i]);
    if (opt == "nx" && !xx) {
      nx = true;
    } else if (opt == "xx" && !nx) {
      xx = true;
    } else if (opt == "get") {
      get = true;
    } else if (opt == "keepttl" && !expiry) {
      keepttl = true;
    } else if (is_expiry_unit(opt) && !expiry && !keepttl && i + 1 < c.args.size()) {
      std::string error;
      if (!deadline_of(c, opt, c.args[++i], "set", &deadline, &error)) return c.out.error(error);
      expiry = true;
    } else {
      return c.out.error("ERR syntax error");
    }
  }
  KeyOps& ks = c.keys;
  if (!nx && !xx && !get && !keepttl) {
    const Status s = ks.set(c.args[1], c.args[2], deadline);
    if (!s.ok()) return store_error(c, s);
    return c.out.simple("OK");
  }
  bool applied = false;
  std::optional<std::string> old;
  const Status s = ks.modify(c.args[1], [&](const Entry* cur) {
    old = cur != nullptr ? std::optional<std::string>(cur->value) : std::nullopt;
    applied = !(nx && cur != nullptr) && !(xx && cur == nullptr);
    if (!applied) return Change::keep();
    const std::uint64_t d = keepttl && cur != nullptr ? cur->deadline_ms : deadline;
    return Change::set(std::string(c.args[2]), d);
  });
  if (!s.ok()) return store_error(c, s);
  if (get) return old ? c.out.bulk(*old) : c.out.null();
  if (!applied) return c.out.null();
  c.out.simple("OK");
}

// Sets `key` if it is absent (or expired); whether it did.
Status set_if_absent(Call& c, std::string_view key, std::string_view value, bool* set) {
  // The common case, one store call; an expired key is present to the
  // store, so AlreadyExists is decided again by modify.
  if (c.txn == nullptr) {
    const Status s = c.server.store().insert(key, encode_entry(value, 0));
    *set = s.ok();
    if (!s.is_already_exists()) return s;
  }
  return c.keys.modify(key, [&](const Entry* cur) {
    *set = cur == nullptr;
    return *set ? Change::set(std::string(value), 0) : Change::keep();
  });
}

void cmd_setnx(Call& c) {
  bool set = false;
  const Status s = set_if_absent(c, c.args[1], c.args[2], &set);
  if (!s.ok()) return store_error(c, s);
  c.out.integer(set ? 1 : 0);
}

// SETEX key seconds value, PSETEX key milliseconds value
void set_with_expiry(Call& c, std::string_view unit) {
  std::uint64_t deadline = 0;
  std::string error;
  if (!deadline_of(c, unit, c.args[2], c.args[0], &deadline, &error)) return c.out.error(error);
  const Status s = c.keys.set(c.args[1], c.args[3], deadline);
  if (!s.ok()) return store_error(c, s);
  c.out.simple("OK");
}
void cmd_setex(Call& c) { set_with_expiry(c, "ex"); }
void cmd_psetex(Call& c) { set_with_expiry(c, "px"); }

void cmd_getset(Call& c) {
  std::optional<std::string> old;
  const Status s = c.keys.modify(c.args[1], [&](const Entry* cur) {
    old = cur != nullptr ? std::optional<std::string>(cur->value) : std::nullopt;
    return Change::set(std::string(c.args[2]), 0);
  });
  if (!s.ok()) return store_error(c, s);
  old ? c.out.bulk(*old) : c.out.null();
}

void cmd_getdel(Call& c) {
  std::optional<std::string> old;
  const Status s = c.keys.modify(c.args[1], [&](const Entry* cur) {
    old = cur != nullptr ? std::optional<std::string>(cur->value) : std::nullopt;
    return cur != nullptr ? Change::remove() : Change::keep();
  });
  if (!s.ok()) return store_error(c, s);
  old ? c.out.bulk(*old) : c.out.null();
}

// GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]
void cmd_getex(Call& c) {
  bool persist = false;
  bool expiry = false;
  std::uint64_t deadline = 0;
  for (std::size_t i = 2; i < c.args.size(); ++i) {
    const std::string opt = lower(c.args[i]);
    if (opt == "persist" && !expiry && !persist) {
      persist = true;
    } else if (is_expiry_unit(opt) && !expiry && !persist && i + 1 < c.args.size()) {
      std::string error;
      if (!deadline_of(c, opt, c.args[++i], "getex", &deadline, &error)) return c.out.error(error);
      expiry = true;
    } else {
      return c.out.error("ERR syntax error");
    }
  }
  if (!persist && !expiry) return cmd_get(c);
  std::optional<std::string> value;
  const Status s = c.keys.modify(c.args[1], [&](const Entry* cur) {
    value = cur != nullptr ? std::optional<std::string>(cur->value) : std::nullopt;
    if (cur == nullptr) return Change::keep();
    return Change::set(cur->value, persist ? 0 : deadline);
  });
  if (!s.ok()) return store_error(c, s);
  value ? c.out.bulk(*value) : c.out.null();
}

void cmd_strlen(Call& c) {
  Entry e;
  const Status s = c.keys.get(c.args[1], &e);
  if (s.is_not_found()) return c.out.integer(0);
  if (!s.ok()) return store_error(c, s);
  c.out.integer(static_cast<std::int64_t>(e.value.size()));
}

void cmd_mget(Call& c) {
  c.out.array(c.args.size() - 1);
  Entry e;
  for (std::size_t i = 1; i < c.args.size(); ++i) {
    const Status s = c.keys.get(c.args[i], &e);
    if (s.ok()) {
      c.out.bulk(e.value);
    } else {
      // Redis answers nil for a key it cannot give, whatever the reason.
      c.out.null();
    }
  }
}

// Runs body(txn) in a store transaction, again while a lock wait aborts it;
// under EXEC, in EXEC's transaction (committed by EXEC). NotSupported when
// the engine has no transactions.
Status in_transaction(Call& c, const std::function<Status(Transaction&)>& body) {
  if (c.txn != nullptr) return body(*c.txn);
  Store& store = c.server.store();
  for (;;) {
    std::unique_ptr<Transaction> txn;
    Status s = store.transaction(&txn);
    if (!s.ok()) return s;
    s = body(*txn);
    if (s.ok()) s = txn->commit();
    if (!s.is_aborted()) return s;
  }
}

// MSET key value [key value ...]: one transaction where the engine has them,
// so that no reader sees some of the keys set and a crash keeps all or none;
// elsewhere one write per key, in order (docs/server.md, "Differences").
void cmd_mset(Call& c) {
  if (c.args.size() % 2 == 0) return wrong_args(c, "mset");
  Status s = in_transaction(c, [&](Transaction& txn) {
    for (std::size_t i = 1; i + 1 < c.args.size(); i += 2) {
      if (Status w = txn.upsert(c.args[i], encode_entry(c.args[i + 1], 0)); !w.ok()) return w;
    }
    return Status::OK();
  });
  if (s.is_not_supported()) {
    s = Status::OK();
    for (std::size_t i = 1; i + 1 < c.args.size() && s.ok(); i += 2) {
      s = c.keys.set(c.args[i], c.args[i + 1], 0);
    }
  }
  if (!s.ok()) return store_error(c, s);
  c.out.simple("OK");
}

// MSETNX key value [key value ...]: all keys set, or none when any exists.
// One key is one atomic modify on every engine; several need the engine's
// transactions, and are refused on an engine without them.
void cmd_msetnx(Call& c) {
  if (c.args.size() % 2 == 0) return wrong_args(c, "msetnx");
  KeyOps& ks = c.keys;
  if (c.args.size() == 3) {
    bool set = false;
    const Status s = set_if_absent(c, c.args[1], c.args[2], &set);
    if (!s.ok()) return store_error(c, s);
    return c.out.integer(set ? 1 : 0);
  }
  bool any_exists = false;
  const std::uint64_t now = ks.now_ms();
  const Status s = in_transaction(c, [&](Transaction& txn) {
    any_exists = false;
    std::string stored;
    for (std::size_t i = 1; i + 1 < c.args.size(); i += 2) {
      const Status g = txn.get(c.args[i], &stored);
      if (g.ok()) {
        const Decoded d = decode_entry(stored);
        if (d.deadline_ms == 0 || d.deadline_ms > now) {
          any_exists = true;
          return Status::OK();  // commits nothing written
        }
      } else if (!g.is_not_found()) {
        return g;
      }
    }
    for (std::size_t i = 1; i + 1 < c.args.size(); i += 2) {
      if (Status w = txn.upsert(c.args[i], encode_entry(c.args[i + 1], 0)); !w.ok()) return w;
    }
    return Status::OK();
  });
  if (s.is_not_supported()) {
    return c.out.error("ERR MSETNX of several keys needs an engine with transactions (pmhash engines "
                       "lists them); this server's engine has none");
  }
  if (!s.ok()) return store_error(c, s);
  c.out.integer(any_exists ? 0 : 1);
}

void cmd_append(Call& c) {
  std::size_t length = 0;
  const Status s = c.keys.modify(c.args[1], [&](const Entry* cur) {
    std::string value = cur != nullptr ? cur->value : std::string();
    value.append(c.args[2]);
    length = value.size();
    return Change::set(std::move(value), cur != nullptr ? cur->deadline_ms : 0);
  });
  if (s.is_invalid_argument()) return c.out.error("ERR string exceeds maximum allowed size");
  if (!s.ok()) return store_error(c, s);
  c.out.integer(static_cast<std::int64_t>(length));
}

// INCR, DECR, INCRBY, DECRBY: the value is a signed 64-bit decimal; the
// key keeps its deadline.
void increment(Call& c, std::int64_t by) {
  std::int64_t result = 0;
  std::string_view error;
  const Status s = c.keys.modify(c.args[1], [&](const Entry* cur) {
    error = {};
    std::int64_t n = 0;
    if (cur != nullptr && !parse_int(cur->value, &n)) {
      error = kNotInteger;
      return Change::keep();
    }
    if ((by > 0 && n > INT64_MAX - by) || (by < 0 && n < INT64_MIN - by)) {
      error = "ERR increment or decrement would overflow";
      return Change::keep();
    }
    result = n + by;
    return Change::set(std::to_string(result), cur != nullptr ? cur->deadline_ms : 0);
  });
  if (!s.ok()) return store_error(c, s);
  if (!error.empty()) return c.out.error(error);
  c.out.integer(result);
}

void cmd_incr(Call& c) { increment(c, 1); }
void cmd_decr(Call& c) { increment(c, -1); }

void cmd_incrby(Call& c) {
  std::int64_t by = 0;
  if (!parse_int(c.args[2], &by)) return c.out.error(kNotInteger);
  increment(c, by);
}

void cmd_decrby(Call& c) {
  std::int64_t by = 0;
  if (!parse_int(c.args[2], &by)) return c.out.error(kNotInteger);
  if (by == INT64_MIN) return c.out.error("ERR decrement would overflow");
  increment(c, -by);
}

// A decimal or exponent float as Redis accepts it: no spaces, not NaN.
bool parse_float(std::string_view text, long double* out) {
  if (text.empty() || text.size() > 5000 || std::isspace(static_cast<unsigned char>(text.front())) ||
      std::isspace(static_cast<unsigned char>(text.back()))) {
    return false;
  }
  const std::string copy(text);
  errno = 0;
  char* end = nullptr;
  const long double v = std::strtold(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || errno == ERANGE || std::isnan(v)) return false;
  *out = v;
  return true;
}

// The shortest form Redis prints a long double in: 17 significant digits,
// no trailing zeros after the point.
std::string format_float(long double v) {
  char buf[64];
  const int n = std::snprintf(buf, sizeof buf, "%.17Lg", v);
  std::string out(buf, static_cast<std::size_t>(std::max(n, 0)));
  if (out.find('.') != std::string::npos && out.find('e') == std::string::npos) {
    while (out.back() == '0') out.pop_back();
    if (out.back() == '.') out.pop_back();
  }
  return out;
}

void cmd_incrbyfloat(Call& c) {
  long double by = 0;
  if (!parse_float(c.args[2], &by)) return c.out.error("ERR value is not a valid float");
  std::string result;
  std::string_view error;
  const Status s = c.keys.modify(c.args[1], [&](const Entry* cur) {
    error = {};
    long double n = 0;
    if (cur != nullptr && !parse_float(cur->value, &n)) {
      error = "ERR value is not a valid float";
      return Change::keep();
    }
    const long double sum = n + by;
    if (std::isnan(sum) || std::isinf(sum)) {
      error = "ERR increment would produce NaN or Infinity";
      return Change::keep();
    }
    result = format_float(sum);
    return Change::set(result, cur != nullptr ? cur->deadline_ms : 0);
  });
  if (!s.ok()) return store_error(c, s);
  if (!error.empty()) return c.out.error(error);
  c.out.bulk(result);
}

// --- expiry ----------------------------------------------------------------

// EXPIRE key seconds, PEXPIRE key ms, EXPIREAT key unix-s, PEXPIREAT key
// unix-ms, each [NX | XX | GT | LT]. A deadline not in the future removes
// the key. 1 when the deadline was set (or the key removed), 0 when the key
// is absent or the condition failed. No deadline counts as infinitely far
// (GT never holds against it, LT always does).
void set_expiry(Call& c, std::string_view unit) {
  bool nx = false, xx = false, gt = false, lt = false;
  for (std::size_t i = 3; i < c.args.size(); ++i) {
    const std::string opt = lower(c.args[i]);
    if (opt == "nx") {
      nx = true;
    } else if (opt == "xx") {
      xx = true;
    } else if (opt == "gt") {
      gt = true;
    } else if (opt == "lt") {
      lt = true;
    } else {
      return c.out.error("ERR Unsupported option " + std::string(c.args[i]));
    }
  }
  if (nx && (xx || gt || lt)) {
    return c.out.error("ERR NX and XX, GT or LT options at the same time are not compatible");
  }
  if (gt && lt) return c.out.error("ERR GT and LT options at the same time are not compatible");
  std::int64_t n = 0;
  if (!parse_int(c.args[2], &n)) return c.out.error(kNotInteger);
  KeyOps& ks = c.keys;
  const std::uint64_t now = ks.now_ms();
  const bool seconds = unit == "ex" || unit == "exat";
  const bool relative = unit == "ex" || unit == "px";
  // In 128 bits, so that no amount a client sends can overflow.
  __int128 ms = seconds ? static_cast<__int128>(n) * 1000 : n;
  if (relative) ms += now;
  if (ms > INT64_MAX || ms < INT64_MIN) return c.out.error(expire_error(c.args[0]));
  const bool in_past = ms <= static_cast<__int128>(now);
  const std::uint64_t deadline = in_past ? 0 : static_cast<std::uint64_t>(ms);
  bool applied = false;
  const Status s = ks.modify(c.args[1], [&](const Entry* cur) {
    applied = false;
    if (cur == nullptr) return Change::keep();
    const bool has = cur->deadline_ms != 0;
    if ((nx && has) || (xx && !has)) return Change::keep();
    if (gt && (!has || (!in_past && deadline <= cur->deadline_ms) || in_past)) return Change::keep();
    if (lt && has && !in_past && deadline >= cur->deadline_ms) return Change::keep();
    applied = true;
    if (in_past) return Change::remove();
    return Change::set(cur->value, deadline);
  });
  if (!s.ok()) return store_error(c, s);
  c.out.integer(applied ? 1 : 0);
}

void cmd_expire(Call& c) { set_expiry(c, "ex"); }
void cmd_pexpire(Call& c) { set_expiry(c, "px"); }
void cmd_expireat(Call& c) { set_expiry(c, "exat"); }
void cmd_pexpireat(Call& c) { set_expiry(c, "pxat"); }

// TTL and PTTL: -2 for an absent key, -1 for one without a deadline.
void remaining(Call& c, bool in_seconds) {
  KeyOps& ks = c.keys;
  Entry e;
  const Status s = ks.get(c.args[1], &e);
  if (s.is_not_found()) return c.out.integer(-2);
  if (!s.ok()) return store_error(c, s);
  if (e.deadline_ms == 0) return c.out.integer(-1);
  const std::uint64_t now = ks.now_ms();
  const std::uint64_t ms = e.deadline_ms > now ? e.deadline_ms - now : 0;
  c.out.integer(static_cast<std::int64_t>(in_seconds ? (ms + 500) / 1000 : ms));
}

void cmd_ttl(Call& c) { remaining(c, true); }
void cmd_pttl(Call& c) { remaining(c, false); }

void cmd_persist(Call& c) {
  bool applied = false;
  const Status s = c.keys.modify(c.args[1], [&](const Entry* cur) {
    applied = cur != nullptr && cur->deadline_ms != 0;
    return applied ? Change::set(cur->value, 0) : Change::keep();
  });
  if (!s.ok()) return store_error(c, s);
  c.out.integer(applied ? 1 : 0);
}

// --- keys ----------------------------------------------------------------

void cmd_del(Call& c) {
  std::int64_t removed = 0;
  for (std::size_t i = 1; i < c.args.size(); ++i) {
    bool was = false;
    const Status s = c.keys.remove(c.args[i], &was);
    if (!s.ok()) return store_error(c, s);
    removed += was ? 1 : 0;
  }
  c.out.integer(removed);
}

void cmd_exists(Call& c) {
  std::int64_t found = 0;
  Entry e;
  for (std::size_t i = 1; i < c.args.size(); ++i) {
    const Status s = c.keys.get(c.args[i], &e);
    if (s.ok()) {
      ++found;
    } else if (!s.is_not_found()) {
      return store_error(c, s);
    }
  }
  c.out.integer(found);
}

void cmd_type(Call& c) {
  Entry e;
  const Status s = c.keys.get(c.args[1], &e);
  if (s.is_not_found()) return c.out.simple("none");
  if (!s.ok()) return store_error(c, s);
  c.out.simple("string");
}

void cmd_dbsize(Call& c) { c.out.integer(static_cast<std::int64_t>(c.server.store().size())); }

void cmd_keys(Call& c) {
  std::vector<std::string> keys;
  const std::string_view pattern = c.args[1];
  const Status s = c.server.keyspace().for_each([&](std::string_view key, const Decoded&) {
    if (glob_match(pattern, key)) keys.emplace_back(key);
    return true;
  });
  if (!s.ok()) return store_error(c, s);
  c.out.array(keys.size());
  for (const std::string& k : keys) c.out.bulk(k);
}

// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: one step of
// Store::scan from the cursor, whose guarantee it has (a key present for a
// whole scan comes at least once, also while the index resizes). COUNT is
// how many keys the step passes at least before MATCH and TYPE filter them
// (default 10, as Redis); the cursor is the store's, a decimal number.
void cmd_scan(Call& c) {
  std::uint64_t cursor = 0;
  {
    const std::string_view t = c.args[1];
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), cursor);
    if (ec != std::errc() || end != t.data() + t.size()) return c.out.error("ERR invalid cursor");
  }
  std::optional<std::string_view> pattern;
  std::int64_t count = 10;
  bool strings = true;
  for (std::size_t i = 2; i < c.args.size(); i += 2) {
    if (i + 1 >= c.args.size()) return c.out.error("ERR syntax error");
    const std::string opt = lower(c.args[i]);
    if (opt == "match") {
      pattern = c.args[i + 1];
    } else if (opt == "count") {
      if (!parse_int(c.args[i + 1], &count)) return c.out.error(kNotInteger);
      if (count < 1) return c.out.error("ERR syntax error");
    } else if (opt == "type") {
      // Every value here is a string: another type matches nothing.
      strings = lower(c.args[i + 1]) == "string";
    } else {
      return c.out.error("ERR syntax error");
    }
  }
  std::vector<std::string> keys;
  std::uint64_t next = 0;
  const Status s = c.server.keyspace().scan(
      cursor, static_cast<std::size_t>(count),
      [&](std::string_view key, const Decoded&) {
        if (strings && (!pattern || glob_match(*pattern, key))) keys.emplace_back(key);
      },
      &next);
  if (!s.ok()) return store_error(c, s);
  c.out.array(2);
  c.out.bulk(std::to_string(next));
  c.out.array(keys.size());
  for (const std::string& k : keys) c.out.bulk(k);
}

void cmd_randomkey(Call& c) {
  std::string key;
  const Status s = c.server.keyspace().random_key(&key);
  if (s.is_not_found()) return c.out.null();
  if (!s.ok()) return store_error(c, s);
  c.out.bulk(key);
}

// --- transactions (docs/server.md, "Transactions") ---------------------
//
// MULTI queues the requests that follow (each answered +QUEUED, after the
// checks a request gets before it runs: a known command, its arity); EXEC
// runs them all in ONE store transaction and answers their replies as an
// array. So on an engine with transactions a MULTI block is what Redis
// promises and more: no other client sees part of it (strict two-phase
// locking), and a crash keeps all of its writes or none. A command whose
// own reply is an error (INCR of a word) does not stop the others, as in
// Redis; a store error (the pool full, the store closing) ends the whole
// transaction with nothing applied and EXEC answers -EXECABORT; a lock wait
// that timed out runs the whole block again. WATCH records each key's live
// value (or its absence); EXEC first reads each watched key in the
// transaction, locking it, and answers a null array, running nothing, when
// one differs. On an engine without transactions MULTI and WATCH are
// refused: queuing the commands would only pretend isolation.

// Whether the store can run MULTI; an error reply when not.
bool transactions_or_refuse(Call& c, std::string_view command) {
  if (c.server.transactions()) return true;
  c.out.error("ERR " + std::string(command) +
              " needs an engine with transactions, and this server's engine has none "
              "(pmhash engines lists which have them; docs/server.md, \"Transactions\")");
  return false;
}

// Refused MULTI still opens the block, spoiled: a client that pipelined
// MULTI, its commands and EXEC gets errors for all of them and nothing runs,
// rather than its commands run one by one outside any transaction.
void cmd_multi(Call& c) {
  if (c.session.in_multi) return c.out.error("ERR MULTI calls can not be nested");
  c.session.in_multi = true;
  if (!transactions_or_refuse(c, "MULTI")) {
    c.session.multi_refused = true;
    c.session.multi_unsupported = true;
    return;
  }
  c.out.simple("OK");
}

void cmd_discard(Call& c) {
  if (!c.session.in_multi) return c.out.error("ERR DISCARD without MULTI");
  c.session.end_multi();
  c.out.simple("OK");
}

// The state of a key WATCH compares: its stored bytes while it is live,
// nullopt when it is absent or expired.
std::optional<std::string> watch_state(Keyspace& ks, const Status& s, std::string stored) {
  if (!s.ok()) return std::nullopt;
  const Decoded d = decode_entry(stored);
  if (ks.expired(d, ks.now_ms())) return std::nullopt;
  return stored;
}

void cmd_watch(Call& c) {
  if (!transactions_or_refuse(c, "WATCH")) return;
  Session& session = c.session;
  for (std::size_t i = 1; i < c.args.size(); ++i) {
    std::string stored;
    const Status s = c.server.store().get(c.args[i], &stored);
    if (!s.ok() && !s.is_not_found()) return store_error(c, s);
    std::optional<std::string> state = watch_state(c.server.keyspace(), s, std::move(stored));
    const std::uint64_t bytes = c.args[i].size() + (state ? state->size() : 0) + 64;
    if (session.watched_bytes + bytes > c.server.config().limits.max_request) {
      return c.out.error("ERR the watched keys and values passed client-query-buffer-limit");
    }
    session.watched_bytes += bytes;
    session.watched.emplace_back(std::string(c.args[i]), std::move(state));
  }
  c.out.simple("OK");
}

void cmd_unwatch(Call& c) {
  c.session.watched.clear();
  c.session.watched.shrink_to_fit();
  c.session.watched_bytes = 0;
  c.out.simple("OK");
}

const Command* find_command(std::string_view name);

// How often EXEC runs its block again after lock waits timed out before it
// gives up (each run waits at most the lock timeout per lock).
constexpr int kExecRuns = 100;

void cmd_exec(Call& c) {
  Session& session = c.session;
  if (!session.in_multi) return c.out.error("ERR EXEC without MULTI");
  if (session.multi_refused) {
    session.end_multi();
    return c.out.error("EXECABORT Transaction discarded because of previous errors.");
  }
  const std::vector<std::vector<std::string>> queued = std::move(session.queued);
  const auto watched = std::move(session.watched);
  session.end_multi();
  Keyspace& ks = c.server.keyspace();
  std::string replies;
  Status failure;
  for (int run = 0; run < kExecRuns; ++run) {
    std::unique_ptr<Transaction> txn;
    if (Status s = c.server.store().transaction(&txn); !s.ok()) return store_error(c, s);
    // WATCH: every watched key as it was, read (and locked) in the
    // transaction, so nothing can change it before the commit.
    failure = Status::OK();
    bool changed = false;
    for (const auto& [key, seen] : watched) {
      std::string stored;
      const Status g = txn->get(key, &stored);
      if (!g.ok() && !g.is_not_found()) {
        failure = g;
        break;
      }
      if (watch_state(ks, g, std::move(stored)) != seen) {
        changed = true;
        break;
      }
    }
    if (failure.is_aborted()) continue;
    if (!failure.ok()) break;
    if (changed) {
      txn->abort();
      return c.out.null_array();
    }
    replies.clear();
    ReplyWriter out(&replies, c.out.protocol());
    TxnKeys keys(ks, *txn);
    Call sub{c.server, c.sessions, session, {}, out, keys, txn.get(), Status::OK()};
    out.array(queued.size());
    std::vector<std::string_view> args;
    for (const std::vector<std::string>& words : queued) {
      args.assign(words.begin(), words.end());
      sub.args = args;
      find_command(args[0])->run(sub);
      if (!sub.txn_failure.ok()) break;
    }
    failure = sub.txn_failure;
    if (failure.ok()) failure = txn->commit();
    if (failure.ok()) {
      ks.note_expired(keys.expired_removed());
      return c.out.raw(replies);
    }
    txn->abort();
    if (!failure.is_aborted()) break;
  }
  c.out.error("EXECABORT Transaction failed and nothing of it was applied: " + failure.to_string());
}

// Queues a request between MULTI and EXEC; false when it is not to be
// queued but run now (EXEC, DISCARD, MULTI, QUIT).
bool queue_in_multi(Call& c, const Command& cmd) {
  const std::string_view name = cmd.name;
  if (name == "exec" || name == "discard" || name == "multi" || name == "quit") return false;
  Session& session = c.session;
  if (session.multi_unsupported) {
    c.out.error("ERR not run: MULTI was refused (this server's engine has no transactions); "
                "EXEC or DISCARD ends the block");
    return true;
  }
  if ((cmd.flags & kNoMulti) != 0 || name == "watch") {
    session.multi_refused = true;
    c.out.error("ERR Command not allowed inside a transaction");
    return true;
  }
  std::uint64_t bytes = 32;
  for (std::string_view a : c.args) bytes += a.size() + 16;
  const RequestLimits& limits = c.server.config().limits;
  if (session.queued_bytes + bytes > limits.max_request || session.queued.size() >= limits.max_args) {
    // The queue is dropped at once: EXEC can only refuse it now.
    session.queued.clear();
    session.queued.shrink_to_fit();
    session.queued_bytes = 0;
    session.multi_refused = true;
    c.out.error("ERR the requests queued since MULTI passed client-query-buffer-limit");
    return true;
  }
  session.queued_bytes += bytes;
  session.queued.emplace_back(c.args.begin(), c.args.end());
  c.out.simple("QUEUED");
  return true;
}

// FLUSHDB and FLUSHALL [ASYNC | SYNC]: removes every key present when the
// command starts, one removal each. Not one atomic step: a client may see
// some keys gone and others not yet, a key written meanwhile may stay, and a
// crash in the middle leaves the rest (docs/server.md, "Differences").
void cmd_flushdb(Call& c) {
  if (c.args.size() > 2 || (c.args.size() == 2 && lower(c.args[1]) != "async" && lower(c.args[1]) != "sync")) {
    return c.out.error("ERR syntax error");
  }
  // A scan step at a time, so DRAM stays bounded by a step.
  Store& store = c.server.store();
  std::uint64_t cursor = 0;
  do {
    std::vector<std::string> keys;
    Status s = store.scan(
        cursor, Keyspace::kSweepStep,
        [&](std::string_view key, std::string_view) { keys.emplace_back(key); }, &cursor);
    for (std::size_t i = 0; s.ok() && i < keys.size(); ++i) {
      s = store.remove(keys[i]);
      if (s.is_not_found()) s = Status::OK();
    }
    if (!s.ok()) return store_error(c, s);
  } while (cursor != 0);
  c.out.simple("OK");
}

// --- server ----------------------------------------------------------------

void cmd_time(Call& c) {
  const std::uint64_t us = now_us();
  c.out.array(2);
  c.out.bulk(std::to_string(us / 1000000));
  c.out.bulk(std::to_string(us % 1000000));
}

// SAVE and BGSAVE make every acknowledged write durable (Store::sync):
// with strict durability that is already so; with epoch durability it ends the
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
  // CLIENT SETINFO LIB-NAME|LIB-VER value: what client libraries send on
  // connect; accepted and not kept.
  if (sub == "setinfo" && c.args.size() == 4) {
    const std::string attr = lower(c.args[2]);
    if (attr != "lib-name" && attr != "lib-ver") {
      return c.out.error("ERR Unrecognized option '" + std::string(c.args[2]) + "'");
    }
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
    {"append", 3, kWrite, 1, 1, 1, "Appends to a key's value.", cmd_append},
    {"auth", -2, kNoAuth | kFast | kStale | kLoading | kNoMulti, 0, 0, 0, "Authenticates the connection.", cmd_auth},
    {"bgsave", -1, kAdmin | kNoMulti, 0, 0, 0, "Makes every acknowledged write durable.", cmd_bgsave},
    {"client", -2, kAdmin | kStale | kLoading, 0, 0, 0, "Connection commands.", cmd_client},
    {"command", -1, kLoading | kStale, 0, 0, 0, "Details about the commands.", cmd_command},
    {"config", -2, kAdmin | kStale | kLoading, 0, 0, 0, "The server's configuration.", cmd_config},
    {"dbsize", 1, kReadonly | kFast, 0, 0, 0, "The number of keys.", cmd_dbsize},
    {"decr", 2, kWrite | kFast, 1, 1, 1, "Decrements an integer value by one.", cmd_decr},
    {"decrby", 3, kWrite | kFast, 1, 1, 1, "Decrements an integer value.", cmd_decrby},
    {"del", -2, kWrite, 1, -1, 1, "Deletes keys.", cmd_del},
    {"discard", 1, kFast | kLoading | kStale, 0, 0, 0, "Drops the requests queued since MULTI.", cmd_discard},
    {"echo", 2, kFast, 0, 0, 0, "Returns the given string.", cmd_echo},
    {"exec", 1, kLoading | kStale, 0, 0, 0, "Runs the requests queued since MULTI as one store transaction.", cmd_exec},
    {"exists", -2, kReadonly | kFast, 1, -1, 1, "How many of the keys exist.", cmd_exists},
    {"expire", -3, kWrite | kFast, 1, 1, 1, "Sets a key's time to live in seconds.", cmd_expire},
    {"expireat", -3, kWrite | kFast, 1, 1, 1, "Sets a key's expiry as a Unix time in seconds.", cmd_expireat},
    {"flushall", -1, kWrite | kNoMulti, 0, 0, 0, "Removes every key.", cmd_flushdb},
    {"flushdb", -1, kWrite | kNoMulti, 0, 0, 0, "Removes every key.", cmd_flushdb},
    {"get", 2, kReadonly | kFast, 1, 1, 1, "The value of a key.", cmd_get},
    {"getdel", 2, kWrite | kFast, 1, 1, 1, "Returns a key's value and deletes the key.", cmd_getdel},
    {"getex", -2, kWrite | kFast, 1, 1, 1, "Returns a key's value and sets or clears its expiry.", cmd_getex},
    {"getset", 3, kWrite | kFast, 1, 1, 1, "Sets a key's value and returns the previous one.", cmd_getset},
    {"hello", -1, kNoAuth | kFast | kStale | kLoading | kNoMulti, 0, 0, 0, "Handshake: protocol version, authentication, name.", cmd_hello},
    {"incr", 2, kWrite | kFast, 1, 1, 1, "Increments an integer value by one.", cmd_incr},
    {"incrby", 3, kWrite | kFast, 1, 1, 1, "Increments an integer value.", cmd_incrby},
    {"incrbyfloat", 3, kWrite | kFast, 1, 1, 1, "Increments a floating-point value.", cmd_incrbyfloat},
    {"info", -1, kLoading | kStale, 0, 0, 0, "Information and counters about the server and its store.", cmd_info},
    {"keys", 2, kReadonly | kNoMulti, 0, 0, 0, "Every key matching a pattern.", cmd_keys},
    {"lastsave", 1, kFast | kLoading | kStale, 0, 0, 0, "When SAVE or BGSAVE last succeeded.", cmd_lastsave},
    {"mget", -2, kReadonly | kFast, 1, -1, 1, "The values of keys.", cmd_mget},
    {"mset", -3, kWrite, 1, -1, 2, "Sets several keys.", cmd_mset},
    {"msetnx", -3, kWrite, 1, -1, 2, "Sets several keys only if none exists.", cmd_msetnx},
    {"multi", 1, kFast | kLoading | kStale, 0, 0, 0, "Starts queuing requests for EXEC.", cmd_multi},
    {"persist", 2, kWrite | kFast, 1, 1, 1, "Removes a key's expiry.", cmd_persist},
    {"pexpire", -3, kWrite | kFast, 1, 1, 1, "Sets a key's time to live in milliseconds.", cmd_pexpire},
    {"pexpireat", -3, kWrite | kFast, 1, 1, 1, "Sets a key's expiry as a Unix time in milliseconds.", cmd_pexpireat},
    {"ping", -1, kFast | kStale, 0, 0, 0, "Answers PONG, or the given string.", cmd_ping},
    {"psetex", 4, kWrite, 1, 1, 1, "Sets a value and its time to live in milliseconds.", cmd_psetex},
    {"pttl", 2, kReadonly | kFast, 1, 1, 1, "A key's time to live in milliseconds.", cmd_pttl},
    {"quit", -1, kNoAuth | kFast | kStale | kLoading, 0, 0, 0, "Closes the connection.", cmd_quit},
    {"randomkey", 1, kReadonly | kNoMulti, 0, 0, 0, "A key chosen at random.", cmd_randomkey},
    {"save", 1, kAdmin | kNoMulti, 0, 0, 0, "Makes every acknowledged write durable.", cmd_save},
    {"scan", -2, kReadonly | kNoMulti, 0, 0, 0, "Iterates over the keys with a cursor.", cmd_scan},
    {"select", 2, kLoading | kStale | kFast, 0, 0, 0, "Selects database 0 (the only one).", cmd_select},
    {"set", -3, kWrite, 1, 1, 1, "Sets a key's value.", cmd_set},
    {"setex", 4, kWrite, 1, 1, 1, "Sets a value and its time to live in seconds.", cmd_setex},
    {"setnx", 3, kWrite | kFast, 1, 1, 1, "Sets a key's value if the key does not exist.", cmd_setnx},
    {"shutdown", -1, kAdmin | kLoading | kStale | kNoMulti, 0, 0, 0, "Stops the server; the store closes cleanly.", cmd_shutdown},
    {"strlen", 2, kReadonly | kFast, 1, 1, 1, "The length of a key's value.", cmd_strlen},
    {"time", 1, kFast | kLoading | kStale, 0, 0, 0, "The server's time.", cmd_time},
    {"ttl", 2, kReadonly | kFast, 1, 1, 1, "A key's time to live in seconds.", cmd_ttl},
    {"type", 2, kReadonly | kFast, 1, 1, 1, "The type of a key's value: string, or none.", cmd_type},
    {"unlink", -2, kWrite | kFast, 1, -1, 1, "Deletes keys.", cmd_del},
    {"unwatch", 1, kFast | kLoading | kStale, 0, 0, 0, "Forgets the watched keys.", cmd_unwatch},
    {"wait", 3, 0 | kNoMulti, 0, 0, 0, "Waits for replicas: there are none.", cmd_wait},
    {"watch", -2, kFast | kLoading | kStale, 1, -1, 1, "Makes EXEC run only if the keys stay as they are.", cmd_watch},
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
  if (cmd.flags & kNoMulti) flags.push_back("no_multi");
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
    field("expired_keys", num(c.server.keyspace().expired_keys()));
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
    // (How many keys have a deadline is not counted: it is in each value.)
    if (st.items != 0) field("db0", "keys=" + num(st.items));
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
  Call call{server, sessions, session, args, out, server.keyspace(), nullptr, Status::OK()};
  const Command* cmd = find_command(args[0]);
  if (cmd == nullptr) {
    // Between MULTI and EXEC a request refused here spoils the block.
    if (session.in_multi) session.multi_refused = true;
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
    if (session.in_multi) session.multi_refused = true;
    return wrong_args(call, cmd->name);
  }
  if (session.in_multi && queue_in_multi(call, *cmd)) return;
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
