// pmhash-server's engine options (-o NAME=VALUE): checked against the
// engines' descriptors before anything is opened, each mistake one line and
// exit status 2 with no pool made; a valid one reaches the engine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "pmhash/engines.h"
#include "resp_client.h"
#include "scratch_file.h"
#include "server_process.h"
#include "subprocess.h"

namespace pmhash::server {
namespace {

bool is_one_line(const std::string& text) {
  return !text.empty() && text.find('\n') == text.size() - 1;
}

TEST(ServerOptions, MistakesAreOneLineExitTwoAndMakeNoPool) {
  pmhash::testing::ScratchDir dir("pmhash-server-options");
  const std::string pool = dir.str() + "/options.pool";
  // An engine with options and another engine, both from the registry.
  const EngineDescriptor* first = nullptr;
  const EngineDescriptor* other = nullptr;
  for (const EngineDescriptor* e : finished_engines()) {
    if (e->location != Location::kPoolFile) continue;
    if (first == nullptr && !e->options.empty()) {
      first = e;
    } else if (other == nullptr) {
      other = e;
    }
  }
  ASSERT_NE(first, nullptr);
  ASSERT_NE(other, nullptr);
  const OptionSpec& option = first->options.front();
  const std::string name(option.name);
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  for (const Case& c : {
           Case{{"-o", "nosuchengine.x=1"}, "names no engine"},
           Case{{"-o", name}, "not NAME=VALUE"},
           Case{{"--engine", std::string(first->name), "-o", name + "x=1"},
                std::string(first->name) + " has no option '" + name + "x'; its options: " + name},
           Case{{"--engine", std::string(first->name), "-o",
                 name + "=" + std::to_string(static_cast<std::uint64_t>(option.max) + 1)},
                name + " must be " + option_range(option)},
           Case{{"--engine", std::string(other->name), "-o", name + "=" + std::string(option.default_value)},
                "applies to engine " + std::string(first->name) + " only, not " + std::string(other->name)},
       }) {
    std::vector<std::string> args = {"--pool", pool, "--create", "--size", "64M", "--port", "0"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const pmhash::testing::SpawnResult r = pmhash::testing::run_program(PMHASH_SERVER_PATH, args);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_TRUE(is_one_line(r.err)) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.says << "\n" << r.err;
    EXPECT_NE(::access(pool.c_str(), F_OK), 0) << "a refused start made a pool";
  }
}

// pmeh's zone bits shape the first directory: 2^bits segments at create,
// which INFO's engine section shows.
TEST(ServerOptions, AnEngineOptionReachesTheEngine) {
  pmhash::testing::ScratchDir dir("pmhash-server-options");
  for (const char* bits : {"0", "3"}) {
    const std::string pool = dir.str() + "/pmeh-" + bits + ".pool";
    test::ServerProcess server(
        {"--pool", pool, "--create", "--size", "64M", "--engine", "pmeh", "-o", std::string("pmeh.zone_bits=") + bits});
    ASSERT_TRUE(server.ok()) << server.output();
    test::RespClient c(server.port());
    const std::string info = c.call({"INFO", "pmhash"});
    const std::string expect = "pmeh_segments:" + std::to_string(1u << std::stoul(bits)) + "\r\n";
    EXPECT_NE(info.find(expect), std::string::npos) << expect << " in\n" << info;
    EXPECT_EQ(server.stop(SIGTERM), 0) << server.output();
  }
}

}  // namespace
}  // namespace pmhash::server
