// remote/handshake.h - the connection bootstrap of a memory node: what a
// client and a memory node say to each other before the first verb, with
// the shared-secret authentication in it.
//
// The bootstrap is independent of the verb framing (remote/wire.h): a
// transport moves its messages as bytes (the tcp transport and the daemon
// over the socket; a later transport over its own connection setup) and
// starts carrying verbs only once both sides have finished it.
//
// Messages, in order (little-endian, fixed layouts):
//
//   node -> client   NodeHello (64 bytes)
//     +0   magic       kNodeHelloMagic "PMHI"
//     +4   rest        bytes after the first 24: 40
//     +8   size        bytes of the node's region (verbs address [0, size))
//     +16  protocol    kProtocolVersion. Nodes before the bootstrap sent
//                      only the first 24 bytes, with rest 0 and the
//                      memory-node layout version 1 here; a client tells
//                      them apart by this field and names the old daemon.
//     +20  flags       kNodeHasSecret: the node was started with a secret
//     +24  layout      the memory-node layout version (remote/memnode.h)
//     +28  reserved    0
//     +32  nonce       32 random bytes, fresh for this connection (Nn)
//
//   client -> node   ClientHello (80 bytes)
//     +0   magic       kClientHelloMagic "PMCH"
//     +4   protocol    kProtocolVersion
//     +8   flags       kClientHasProof: `proof` is filled in
//     +12  reserved    0
//     +16  nonce       32 random bytes, fresh for this connection (Nc)
//     +48  proof       HMAC-SHA-256(K, "pmhash-memnode client proof" ||
//                      NodeHello || ClientHello[0, 48)), or zeros
//
//   node -> client   Verdict (48 bytes + message)
//     +0   magic       kVerdictMagic "PMVD"
//     +4   status      0: admitted; otherwise a Status::Code and the
//                      connection is closed after the message
//     +8   message     bytes of text after the 48 (at most kMaxMessage)
//     +12  flags       kNodeHasProof: `proof` is filled in
//     +16  proof       HMAC-SHA-256(K, "pmhash-memnode node proof" ||
//                      NodeHello || ClientHello), or zeros
//     +48  message     why the client was refused (status != 0)
//
// A node that cannot take the connection at all (its connection cap)
// sends a Verdict with an error instead of its NodeHello, and closes.
//
// Authentication. The secret is a file of kMinSecretBytes to
// kMaxSecretBytes bytes, readable by its owner only; both sides derive
// the key K = BLAKE2b-256("pmhash-memnode secret v1" || file bytes)
// (libsodium's crypto_generichash). A node with a secret admits a client
// only if its proof is the HMAC above (compared in constant time); it
// refuses one without a proof, or with a wrong one, before any verb runs.
// A client with a secret admits a node only if the node announced a secret
// and its Verdict carries the node proof (so the authentication is
// mutual: a client with a secret refuses a node without one). Each proof
// covers both fresh nonces and everything said before it, so a recorded
// exchange cannot be replayed on another connection, and the two labels
// keep a client proof from being reflected as a node proof. No secret, and
// nothing derived from it but the two proofs, crosses the wire.
//
// What this does not do: the traffic after the bootstrap is neither
// encrypted nor integrity-protected. Someone who can read or alter packets
// on the path can read the verbs, or alter them; authentication keeps out
// whoever merely reaches the port. Run memory nodes on a trusted network,
// or under a tunnel that encrypts.
//
// Threads: a Secret is immutable after load(); NodeSide and ClientSide
// belong to one connection each.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pmhash/status.h"

namespace pmhash::remote::handshake {

inline constexpr std::uint32_t kNodeHelloMagic = 0x49484d50;    // "PMHI"
inline constexpr std::uint32_t kClientHelloMagic = 0x48434d50;  // "PMCH"
inline constexpr std::uint32_t kVerdictMagic = 0x44564d50;      // "PMVD"
// 1: the hello without a nonce, before authentication; 2: this bootstrap.
inline constexpr std::uint32_t kProtocolVersion = 2;

inline constexpr std::uint32_t kNodeHasSecret = 1u << 0;   // NodeHello flags
inline constexpr std::uint32_t kClientHasProof = 1u << 0;  // ClientHello flags
inline constexpr std::uint32_t kNodeHasProof = 1u << 0;    // Verdict flags

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kProofBytes = 32;
inline constexpr std::size_t kNodeHelloBytes = 64;
inline constexpr std::size_t kOldNodeHelloBytes = 24;  // protocol 1
inline constexpr std::size_t kClientHelloBytes = 80;
inline constexpr std::size_t kVerdictBytes = 48;       // without the message
inline constexpr std::size_t kMaxMessage = 1024;

inline constexpr std::size_t kMinSecretBytes = 32;
inline constexpr std::size_t kMaxSecretBytes = 4096;
// Where clients look for the secret file when they are given none.
inline constexpr char kSecretFileEnv[] = "PMHASH_MEMNODE_SECRET_FILE";

// The key derived from a secret file. Wiped from memory when destroyed.
class Secret {
 public:
  Secret() = default;
  Secret(const Secret&) = default;
  Secret& operator=(const Secret&) = default;
  ~Secret();

  // Reads `path`. Errors: IOError if it cannot be read; InvalidArgument if
  // it is not a regular file, holds fewer than kMinSecretBytes or more
  // than kMaxSecretBytes bytes, or is readable or writable by group or
  // others (each message says how to fix it); IOError if libsodium cannot
  // start.
  static Status load(const std::string& path, Secret* out);

  bool empty() const { return !set_; }
  const std::array<unsigned char, 32>& key() const { return key_; }

 private:
  std::array<unsigned char, 32> key_{};
  bool set_ = false;
};

// The node's side of one connection.
class NodeSide {
 public:
  // `secret`: null or empty for a node without one. `secret` must outlive
  // this object.
  NodeSide(const Secret* secret, std::uint64_t region_size, std::uint32_t layout_version);

  // Appends the NodeHello (with a fresh nonce) to `out`.
  void hello(std::vector<char>* out);

  // Offered the bytes received so far: returns 0 while the ClientHello is
  // incomplete. Otherwise it has appended the Verdict to `out` and returns
  // the bytes consumed; `*verdict` is OK (admitted) or why the client was
  // refused (the connection is then to be closed once the Verdict is sent).
  std::size_t on_client_hello(std::span<const char> in, std::vector<char>* out, Status* verdict);

 private:
  const Secret* secret_;
  std::array<char, kNodeHelloBytes> hello_{};
};

// Appends a Verdict refusing the connection with `why` (not OK), for a
// node that turns a connection away before its hello.
void refusal(const Status& why, std::vector<char>* out);

// The client's side of one connection to the node `node` (its name, for
// messages).
class ClientSide {
 public:
  // `secret`: null or empty for a client without one; must outlive this.
  ClientSide(const Secret* secret, std::string node);

  // Offered the bytes received so far: returns 0 while the NodeHello is
  // incomplete; otherwise the bytes consumed, with the ClientHello
  // appended to `out`. An error (a refusal instead of the hello, another
  // protocol, a node without a secret while this client has one) is set
  // in `*error`, naming the node; the connection is then useless.
  std::size_t on_node_hello(std::span<const char> in, std::vector<char>* out, Status* error);

  // Then offered what follows: 0 while the Verdict is incomplete;
  // otherwise the bytes consumed, and `*error` is OK if the node admitted
  // this client (and proved its secret when the client has one).
  std::size_t on_verdict(std::span<const char> in, Status* error);

  std::uint64_t region_size() const { return region_size_; }
  std::uint32_t layout_version() const { return layout_; }

 private:
  const Secret* secret_;
  std::string node_;
  std::array<char, kNodeHelloBytes> node_hello_{};
  std::array<char, kClientHelloBytes> client_hello_{};
  std::uint64_t region_size_ = 0;
  std::uint32_t layout_ = 0;
};

}  // namespace pmhash::remote::handshake
