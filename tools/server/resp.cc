// server/resp.cc - the Redis serialization protocol (server/resp.h).
#include "server/resp.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

namespace pmhash::server {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\0'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A decimal integer with an optional '-', nothing else (no '+', no blanks),
// that fits an int64. False for anything else.
bool parse_int64(std::string_view text, std::int64_t* out) {
  if (text.empty()) return false;
  const char* first = text.data();
  const char* last = first + text.size();
  if (*first == '+') return false;
  const auto [end, ec] = std::from_chars(first, last, *out);
  return ec == std::errc() && end == last;
}

// Splits an inline request into words the way redis-cli quotes them.
// False for an unbalanced quote, or a closing quote followed by a byte
// other than a blank.
bool split_inline(std::string_view line, std::vector<std::string>* words) {
  words->clear();
  std::size_t i = 0;
  const std::size_t n = line.size();
  for (;;) {
    while (i < n && is_blank(line[i])) ++i;
    if (i == n) return true;
    std::string word;
    // Inside a quoted part: its quote character ('"' or '\''), else 0.
    char quote = 0;
    for (;;) {
      if (quote != 0) {
        if (i == n) return false;
        const char c = line[i];
        if (quote == '"' && c == '\\' && i + 3 < n && line[i + 1] == 'x' &&
            hex_value(line[i + 2]) >= 0 && hex_value(line[i + 3]) >= 0) {
          word.push_back(static_cast<char>(hex_value(line[i + 2]) * 16 + hex_value(line[i + 3])));
          i += 4;
        } else if (quote == '"' && c == '\\' && i + 1 < n) {
          const char e = line[i + 1];
          switch (e) {
            case 'n': word.push_back('\n'); break;
            case 'r': word.push_back('\r'); break;
            case 't': word.push_back('\t'); break;
            case 'b': word.push_back('\b'); break;
            case 'a': word.push_back('\a'); break;
            default: word.push_back(e); break;
          }
          i += 2;
        } else if (quote == '\'' && c == '\\' && i + 1 < n && line[i + 1] == '\'') {
          word.push_back('\'');
          i += 2;
        } else if (c == quote) {
          // A closing quote ends the word: a blank or the line's end follows.
          ++i;
          if (i < n && !is_blank(line[i])) return false;
          break;
        } else {
          word.push_back(c);
          ++i;
        }
      } else {
        if (i == n || is_blank(line[i])) break;
        const char c = line[i++];
        if (c == '"' || c == '\'') {
          quote = c;
        } else {
          word.push_back(c);
        }
      }
    }
    words->push_back(std::move(word));
  }
}

}  // namespace

void RequestParser::reset() {
  state_ = State::kStart;
  pos_ = 0;
  scanned_ = 0;
  arg_count_ = 0;
  bulk_len_ = 0;
  spans_.clear();
  consumed_ = 0;
}

RequestParser::Result RequestParser::fail(std::string text) {
  error_ = std::move(text);
  return Result::kError;
}

RequestParser::Result RequestParser::read_header_number(std::string_view in, const char* too_big,
                                                        const char* invalid, std::int64_t* out) {
  // The header starts at pos_ with its type byte; its digits end at "\r\n".
  const std::size_t nl = in.find('\n', scanned_);
  if (nl == std::string_view::npos) {
    if (in.size() - pos_ > limits_.max_inline) return fail(too_big);
    scanned_ = in.size();
    return Result::kIncomplete;
  }
  if (nl - pos_ > limits_.max_inline) return fail(too_big);
  if (nl < pos_ + 2 || in[nl - 1] != '\r') return fail(invalid);
  if (!parse_int64(in.substr(pos_ + 1, nl - 1 - (pos_ + 1)), out)) return fail(invalid);
  pos_ = nl + 1;
  scanned_ = pos_;
  return Result::kRequest;
}

RequestParser::Result RequestParser::parse_inline(std::string_view in) {
  const std::size_t nl = in.find('\n', scanned_);
  if (nl == std::string_view::npos) {
    if (in.size() - pos_ > limits_.max_inline) return fail("Protocol error: too big inline request");
    scanned_ = in.size();
    return Result::kIncomplete;
  }
  if (nl - pos_ > limits_.max_inline) return fail("Protocol error: too big inline request");
  std::string_view line = in.substr(pos_, nl - pos_);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (!split_inline(line, &inline_args_)) return fail("Protocol error: unbalanced quotes in request");
  pos_ = nl + 1;
  scanned_ = pos_;
  args_.assign(inline_args_.begin(), inline_args_.end());
  return Result::kRequest;
}

RequestParser::Result RequestParser::parse(std::string_view in) {
  if (consumed_ != 0) {
    // The previous call returned a request, and the caller dropped its bytes.
    reset();
  }
  args_.clear();
  // pos_: the next byte to read. Between calls the caller keeps the bytes
  // before it (the contract above); a shorter input breaks it.
  if (in.size() < pos_) return fail("Protocol error: the parser's input lost bytes it had read");
  for (;;) {
    if (state_ == State::kStart) {
      if (in.size() <= pos_) return Result::kIncomplete;
      if (in[pos_] != '*') {
        const Result r = parse_inline(in);
        if (r != Result::kRequest) return r;
        if (args_.empty()) continue;  // a blank line: nothing to run
        consumed_ = pos_;
        return Result::kRequest;
      }
      request_start_ = pos_;
      state_ = State::kArgCount;
      scanned_ = pos_;
    }
    if (state_ == State::kArgCount) {
      std::int64_t n = 0;
      const Result r = read_header_number(in, "Protocol error: too big mbulk count string",
                                          "Protocol error: invalid multibulk length", &n);
      if (r != Result::kRequest) return r;
      if (n > 0 && static_cast<std::uint64_t>(n) > limits_.max_args) {
        return fail("Protocol error: invalid multibulk length");
      }
      if (n <= 0) {
        // "*0" and "*-1": an empty request, skipped as Redis does.
        state_ = State::kStart;
        continue;
      }
      arg_count_ = static_cast<std::uint64_t>(n);
      spans_.clear();
      // Reserve for what may come, not for what was announced.
      spans_.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(arg_count_, 64)));
      state_ = State::kArgHeader;
    }
    if (state_ == State::kArgHeader) {
      if (in.size() <= pos_) return Result::kIncomplete;
      if (in[pos_] != '$') {
        return fail(std::string("Protocol error: expected '$', got '") + in[pos_] + "'");
      }
      std::int64_t len = 0;
      const Result r = read_header_number(in, "Protocol error: too big bulk count string",
                                          "Protocol error: invalid bulk length", &len);
      if (r != Result::kRequest) return r;
      if (len < 0 || static_cast<std::uint64_t>(len) > limits_.max_bulk) {
        return fail("Protocol error: invalid bulk length");
      }
      bulk_len_ = static_cast<std::uint64_t>(len);
      // The whole request so far, this argument and its "\r\n": all in
      // 64-bit arithmetic, bounded by max_bulk and the position (both far
      // below 2^63).
      if (static_cast<std::uint64_t>(pos_ - request_start_) + bulk_len_ + 2 > limits_.max_request) {
        return fail("Protocol error: request larger than " + std::to_string(limits_.max_request) +
                    " bytes");
      }
      state_ = State::kArgBody;
    }
    if (state_ == State::kArgBody) {
      if (static_cast<std::uint64_t>(in.size() - pos_) < bulk_len_ + 2) return Result::kIncomplete;
      const std::size_t len = static_cast<std::size_t>(bulk_len_);
      if (in[pos_ + len] != '\r' || in[pos_ + len + 1] != '\n') {
        return fail("Protocol error: expected '\\r\\n' after a bulk string");
      }
      spans_.emplace_back(pos_, len);
      pos_ += len + 2;
      scanned_ = pos_;
      if (spans_.size() < arg_count_) {
        state_ = State::kArgHeader;
        continue;
      }
      args_.reserve(spans_.size());
      for (const auto& [off, n] : spans_) args_.push_back(in.substr(off, n));
      state_ = State::kStart;
      consumed_ = pos_;
      return Result::kRequest;
    }
  }
}

void ReplyWriter::line(char type, std::string_view text) {
  out_->push_back(type);
  const std::size_t at = out_->size();
  out_->append(text);
  for (std::size_t i = at; i < out_->size(); ++i) {
    if ((*out_)[i] == '\r' || (*out_)[i] == '\n') (*out_)[i] = ' ';
  }
  out_->append("\r\n");
}

void ReplyWriter::count(char type, std::uint64_t n) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), n);
  (void)ec;
  out_->push_back(type);
  out_->append(buf, end);
  out_->append("\r\n");
}

void ReplyWriter::simple(std::string_view text) { line('+', text); }

void ReplyWriter::error(std::string_view text) { line('-', text); }

void ReplyWriter::integer(std::int64_t value) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  (void)ec;
  out_->push_back(':');
  out_->append(buf, end);
  out_->append("\r\n");
}

void ReplyWriter::bulk(std::string_view bytes) {
  count('$', bytes.size());
  out_->append(bytes);
  out_->append("\r\n");
}

void ReplyWriter::null() { out_->append(protocol_ == Protocol::kResp3 ? "_\r\n" : "$-1\r\n"); }

void ReplyWriter::null_array() { out_->append(protocol_ == Protocol::kResp3 ? "_\r\n" : "*-1\r\n"); }

void ReplyWriter::array(std::size_t n) { count('*', n); }

void ReplyWriter::map(std::size_t pairs) {
  if (protocol_ == Protocol::kResp3) {
    count('%', pairs);
  } else {
    count('*', std::uint64_t{pairs} * 2);
  }
}

void ReplyWriter::set(std::size_t n) { count(protocol_ == Protocol::kResp3 ? '~' : '*', n); }

void ReplyWriter::real(double value) {
  const std::string text = format_double(value);
  if (protocol_ == Protocol::kResp3) {
    line(',', text);
  } else {
    bulk(text);
  }
}

void ReplyWriter::boolean(bool value) {
  if (protocol_ == Protocol::kResp3) {
    out_->append(value ? "#t\r\n" : "#f\r\n");
  } else {
    out_->append(value ? ":1\r\n" : ":0\r\n");
  }
}

void ReplyWriter::verbatim(std::string_view format, std::string_view text) {
  if (protocol_ != Protocol::kResp3) {
    bulk(text);
    return;
  }
  count('=', std::uint64_t{text.size()} + 4);
  out_->append(format.substr(0, 3));
  out_->push_back(':');
  out_->append(text);
  out_->append("\r\n");
}

std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  (void)ec;
  return std::string(buf, end);
}

}  // namespace pmhash::server
