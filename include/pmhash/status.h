// pmhash/status.h - the one error type of pmhash.
//
// Every fallible call returns a Status. A Status is cheap to copy when it is
// OK (no allocation) and carries a human-readable message otherwise, written
// to say what was wrong and, where possible, what to do about it.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace pmhash {

class Status {
 public:
  enum class Code : unsigned char {
    kOk = 0,
    kNotFound,         // the key is absent (get, update, remove)
    kAlreadyExists,    // the key is present (insert) or the file exists (create)
    kInvalidArgument,  // a key or value beyond the limits, a bad option
    kNoSpace,          // the pool is full; nothing stored was changed
    kCorruption,       // a pool failed validation or check()
    kIOError,          // the operating system refused a file operation
    kBusy,             // too many threads, or the store is closed
    kNotSupported,     // the engine does not offer this operation
    kAborted,          // a transaction was aborted (a lock wait timed out:
                       // a possible deadlock); none of its writes applied
    kConflict,         // compare_and_swap found another value than the one
                       // expected; nothing changed
  };

  Status() = default;

  static Status OK() { return Status(); }
  static Status NotFound(std::string msg = "not found") { return {Code::kNotFound, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) { return {Code::kAlreadyExists, std::move(msg)}; }
  static Status InvalidArgument(std::string msg) { return {Code::kInvalidArgument, std::move(msg)}; }
  static Status NoSpace(std::string msg) { return {Code::kNoSpace, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {Code::kCorruption, std::move(msg)}; }
  static Status IOError(std::string msg) { return {Code::kIOError, std::move(msg)}; }
  static Status Busy(std::string msg) { return {Code::kBusy, std::move(msg)}; }
  static Status NotSupported(std::string msg) { return {Code::kNotSupported, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {Code::kAborted, std::move(msg)}; }
  static Status Conflict(std::string msg = "the value is not the one expected") {
    return {Code::kConflict, std::move(msg)};
  }

  bool ok() const { return code_ == Code::kOk; }
  bool is_not_found() const { return code_ == Code::kNotFound; }
  bool is_already_exists() const { return code_ == Code::kAlreadyExists; }
  bool is_invalid_argument() const { return code_ == Code::kInvalidArgument; }
  bool is_no_space() const { return code_ == Code::kNoSpace; }
  bool is_corruption() const { return code_ == Code::kCorruption; }
  bool is_io_error() const { return code_ == Code::kIOError; }
  bool is_busy() const { return code_ == Code::kBusy; }
  bool is_not_supported() const { return code_ == Code::kNotSupported; }
  bool is_aborted() const { return code_ == Code::kAborted; }
  bool is_conflict() const { return code_ == Code::kConflict; }

  Code code() const { return code_; }
  const std::string& message() const { return msg_; }

  // "<code name>: <message>", or "OK".
  std::string to_string() const;
  static std::string_view code_name(Code code);

 private:
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}

  Code code_ = Code::kOk;
  std::string msg_;
};

}  // namespace pmhash
