// Saving over what is already at a path (docs/safetensors.md, "Atomic save"
// and "Special files"): regular files are replaced whole, links followed,
// devices and FIFOs written in place, the rest refused; a killed save leaves
// nothing, and a name as long as the file system allows can be saved.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/atomic_file.h"
#include "kiln/kiln.h"
#include "unit/expect_error.h"

using kiln::testing::expect_error_with;

using namespace kiln;

namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("kiln_atomic_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

StateDict small_state() {
  StateDict sd;
  sd.set("w", arange(0, 6, 1, {.dtype = kFloat32}).view({2, 3}));
  return sd;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_small_state(const fs::path& p) {
  const StateDict back = load_safetensors(p.string());
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back.at("w").to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

size_t entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(AtomicSave, ADeviceIsWrittenInPlaceAndAFullOneIsAnError) {
  save_safetensors("/dev/null", small_state());
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced by a regular file";
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this machine";
  expect_error_with<IOError>([] { save_safetensors("/dev/full", small_state()); },
                             {"save_safetensors", "/dev/full", "No space left on device"});
}

TEST(AtomicSave, AFifoIsWrittenForItsReaderAndRefusedWithoutOne) {
  const fs::path dir = fresh_dir("fifo");
  const fs::path fifo = dir / "pipe", plain = dir / "plain.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No reader: an error at once, not a wait for one.
  expect_error_with<IOError>([&] { save_safetensors(fifo.string(), small_state()); },
                             {"save_safetensors", "pipe", "no reader"});
  std::string got;
  std::thread reader([&] {
    const int fd = ::open(fifo.c_str(), O_RDONLY);
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
    ::close(fd);
  });
  // The writer may open before the reader: retry until it is there.
  for (int attempt = 0;; ++attempt) {
    try {
      save_safetensors(fifo.string(), small_state());
      break;
    } catch (const IOError&) {
      ASSERT_LT(attempt, 500) << "the reader never opened the FIFO";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  reader.join();
  save_safetensors(plain.string(), small_state());
  EXPECT_EQ(got, slurp(plain));
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  fs::remove_all(dir);
}

TEST(AtomicSave, ALinkIsFollowedAndStaysALink) {
  const fs::path dir = fresh_dir("link");
  const fs::path target = dir / "real.safetensors", link = dir / "link.safetensors";
  std::ofstream(target) << "old";
  fs::create_symlink(target, link);
  save_safetensors(link.string(), small_state());
  EXPECT_TRUE(fs::is_symlink(link));
  expect_small_state(target);
  EXPECT_EQ(entries(dir), 2u);
  // A link to nothing is refused rather than replaced.
  const fs::path dangling = dir / "dangling.safetensors";
  fs::create_symlink(dir / "missing" / "x.safetensors", dangling);
  expect_error_with<IOError>([&] { save_safetensors(dangling.string(), small_state()); },
                             {"save_safetensors", "dangling.safetensors", "symbolic link"});
  EXPECT_TRUE(fs::is_symlink(dangling));
  fs::remove_all(dir);
}

TEST(AtomicSave, DirectoriesAndSocketsAreRefusedUntouched) {
  const fs::path dir = fresh_dir("refused");
  expect_error_with<IOError>([&] { save_safetensors(dir.string(), small_state()); },
                             {"save_safetensors", "Is a directory"});
  const fs::path sock = dir / "s";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  expect_error_with<IOError>([&] { save_safetensors(sock.string(), small_state()); },
                             {"save_safetensors", "socket"});
  EXPECT_TRUE(fs::is_socket(sock));
  ::close(fd);
  fs::remove_all(dir);
}

TEST(AtomicSave, ANameAsLongAsTheFileSystemAllowsIsSaved) {
  const fs::path dir = fresh_dir("long");
  const long max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  ASSERT_GT(max, 12);
  const std::string name = std::string(static_cast<size_t>(max) - 12, 'n') + ".safetensors";
  save_safetensors((dir / name).string(), small_state());
  save_safetensors((dir / name).string(), small_state());  // and replaced
  expect_small_state(dir / name);
  EXPECT_EQ(entries(dir), 1u);
  fs::remove_all(dir);
}

TEST(AtomicSave, AReplacedFileKeepsItsPermissions) {
  const fs::path dir = fresh_dir("mode");
  const fs::path p = dir / "private.safetensors";
  save_safetensors(p.string(), small_state());
  fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
  save_safetensors(p.string(), small_state());
  EXPECT_EQ(fs::status(p).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  fs::remove_all(dir);
}

// A save killed before it commits leaves neither a file nor a temporary one,
// where the file system has unnamed files (O_TMPFILE); the old file stays.
TEST(AtomicSave, AKilledSaveLeavesNothingBehind) {
  const fs::path dir = fresh_dir("killed");
  const int probe = ::open(dir.c_str(), O_TMPFILE | O_WRONLY, 0600);
  if (probe < 0) GTEST_SKIP() << "this file system has no unnamed files (O_TMPFILE)";
  ::close(probe);
  const fs::path p = dir / "model.safetensors";
  save_safetensors(p.string(), small_state());
  const pid_t child = ::fork();
  if (child == 0) {
    io::AtomicFileWriter out(p.string(), "save_safetensors");
    out.write("partial", 7);
    ::kill(::getpid(), SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(entries(dir), 1u);
  expect_small_state(p);
  fs::remove_all(dir);
}

}  // namespace
