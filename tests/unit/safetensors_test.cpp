#include "kiln/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/shape_util.h"
#include "io/atomic_file.h"
#include "io/safetensors_format.h"
#include "kiln/kiln.h"
#include "ops/dispatch.h"
#include "unit/expect_error.h"

namespace kiln {
namespace {
using testing::expect_error_with;
namespace fs = std::filesystem;

// A safetensors file from its parts: the little-endian length of `json`, `json`, `buffer`.
std::string file_bytes(std::string_view json, std::string_view buffer = {}) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
  return out + std::string(json) + std::string(buffer);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The /proc/self/maps line that holds address p: its permissions and its file.
struct MappingInfo {
  std::string perms, file;
};
MappingInfo mapping_at(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    std::istringstream is(line);
    std::string range, perms, offset, dev, inode, file;
    is >> range >> perms >> offset >> dev >> inode;
    std::getline(is >> std::ws, file);
    const size_t dash = range.find('-');
    const uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (addr >= lo && addr < hi) return {perms, file};
  }
  return {};
}

// Values of every dtype, with negatives, fractions and extremes where the dtype has them.
Tensor sample(DType dtype, const Shape& shape = {2, 3}) {
  std::vector<float> v;
  if (dtype == kBool)
    v = {1, 0, 0, 1, 1, 0};
  else if (dtype == kUInt8)
    v = {0, 1, 2, 3, 128, 255};
  else if (is_integral(dtype))
    v = {-3, 0, 1, 2, 100, -128};
  else
    v = {-1.5f, 0, 0.25f, 2, 3.5f, 1000};
  v.resize(static_cast<size_t>(shape_numel(shape)), 7);
  return from_vector<float>(v, shape).to(dtype);
}

constexpr DType kAllDTypes[] = {kBool,  kUInt8,   kInt8,     kInt16,   kInt32,
                                kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};

void expect_same_tensor(const Tensor& got, const Tensor& want, const std::string& name) {
  EXPECT_EQ(got.dtype(), want.dtype()) << name;
  EXPECT_EQ(got.sizes(), want.sizes()) << name;
  EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>()) << name;
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kiln_safetensors_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = fs::canonical(tmpl).string();
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  std::string path(std::string_view name) const { return dir_ + "/" + std::string(name); }
  // Two files of one [64, 64] tensor "w" with other values, a.safetensors and
  // b.safetensors (its negation), for the tests that rewrite a with b's
  // bytes; returns a's dict.
  StateDict save_a_and_b() const {
    StateDict a, b;
    a.set("w", sample(kFloat32, {64, 64}));
    b.set("w", sample(kFloat32, {64, 64}).neg());
    save_safetensors(path("a.safetensors"), a);
    save_safetensors(path("b.safetensors"), b);
    return a;
  }
  std::vector<std::string> dir_entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string dir_;
};

// --- round trips --------------------------------------------------------------

TEST_F(Safetensors, RoundTripsEveryDTypeWithMetadataInInsertionOrder) {
  StateDict sd;
  std::vector<std::string> names;
  for (const DType d : kAllDTypes) {
    names.push_back("z." + std::string(dtype_name(d)));  // not sorted by dtype or name
    sd.set(names.back(), sample(d));
  }
  std::reverse(names.begin(), names.end());
  StateDict reversed;
  for (const auto& n : names) reversed.set(n, sd.at(n));
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"epoch", "3"}, {"", "é"}};
  save_safetensors(path("all.safetensors"), reversed, meta);

  const StateDict loaded = load_safetensors(path("all.safetensors"));
  EXPECT_EQ(loaded.keys(), names);
  for (const auto& n : names) expect_same_tensor(loaded.at(n), sd.at(n), n);
  EXPECT_EQ(SafetensorsFile(path("all.safetensors")).metadata(), meta);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"all.safetensors"});
}

TEST_F(Safetensors, WritesNonContiguousTensorsAsTheirValues) {
  const Tensor base = arange(0, 24, 1, {.dtype = kFloat64}).reshape({2, 3, 4});
  StateDict sd;
  sd.set("transposed", base.transpose(0, 2));
  sd.set("strided", base.slice(2, 0, 4, 3));
  sd.set("expanded", from_vector<int32_t>({5, 6}, Shape{2, 1}).expand({2, 3}));
  sd.set("offset", base.select(0, 1));
  save_safetensors(path("views.safetensors"), sd);
  const StateDict loaded = load_safetensors(path("views.safetensors"));
  for (const auto& [name, t] : sd) {
    ASSERT_FALSE(t.is_contiguous() && name != "offset") << name;
    expect_same_tensor(loaded.at(name), t, name);
    EXPECT_TRUE(loaded.at(name).is_contiguous()) << name;
  }
  EXPECT_EQ(loaded.at("expanded").to_vector<int32_t>(), (std::vector<int32_t>{5, 5, 5, 6, 6, 6}));
}

TEST_F(Safetensors, RoundTripsZeroDimAndEmptyTensors) {
  StateDict sd;
  sd.set("scalar", scalar_tensor(2.5, {.dtype = kFloat64}));
  sd.set("empty", zeros({0}, {.dtype = kFloat32}));
  sd.set("empty3d", zeros({3, 0, 2}, {.dtype = kInt16}));
  sd.set("bool_scalar", scalar_tensor(true));
  save_safetensors(path("edge.safetensors"), sd);
  const StateDict loaded = load_safetensors(path("edge.safetensors"));
  for (const auto& [name, t] : sd) expect_same_tensor(loaded.at(name), t, name);
  EXPECT_EQ(loaded.at("scalar").dim(), 0);
  EXPECT_EQ(loaded.at("scalar").item<double>(), 2.5);
}

TEST_F(Safetensors, SavesAnEmptyStateDict) {
  save_safetensors(path("none.safetensors"), StateDict{});
  EXPECT_EQ(read_file(path("none.safetensors")), file_bytes("{}      "));
  EXPECT_TRUE(load_safetensors(path("none.safetensors")).empty());
}

// The exact bytes: the reference layout (by element size, then name), the
// header in insertion order, padded with spaces to a multiple of 8.
TEST_F(Safetensors, WritesTheHeaderAndLayoutOfTheFormat) {
  StateDict sd;
  sd.set("b", from_vector<float>({1.0f, 2.0f}));
  sd.set("c", from_vector<uint8_t>({9}));
  sd.set("a", from_vector<int64_t>({7}));
  save_safetensors(path("exact.safetensors"), sd, {{"k", "v"}});
  const std::string json =
      R"({"__metadata__":{"k":"v"},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("c":{"dtype":"U8","shape":[1],"data_offsets":[16,17]},)"
      R"("a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  const std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  const std::string data(
      "\x07\0\0\0\0\0\0\0"
      "\0\0\x80\x3f"
      "\0\0\0\x40"
      "\x09",
      17);
  EXPECT_EQ(read_file(path("exact.safetensors")), file_bytes(padded, data));
}

// --- mapping --------------------------------------------------------------------

TEST_F(Safetensors, MappedAlignedTensorsViewAPrivateMappingOfTheFile) {
  StateDict sd;
  for (const DType d : kAllDTypes) sd.set(std::string(dtype_name(d)), sample(d, {5, 3}));
  save_safetensors(path("map.safetensors"), sd);
  StateDict loaded =
      load_safetensors(path("map.safetensors"), Device::cpu(), SafetensorsLoad::kMap);
  for (const auto& [name, t] : loaded) {
    const MappingInfo m = mapping_at(t.data_ptr());
    EXPECT_EQ(m.file, path("map.safetensors")) << name;
    EXPECT_EQ(m.perms.substr(0, 2), "rw") << name;
    EXPECT_EQ(m.perms.back(), 'p') << name;  // private: copy-on-write
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % t.element_size(), 0u) << name;
  }
  // The mapping outlives the file object, the file name and the other tensors.
  Tensor f64;
  {
    SafetensorsFile file(path("map.safetensors"), SafetensorsLoad::kMap);
    f64 = file.get("float64");
  }
  loaded = StateDict{};
  fs::remove(path("map.safetensors"));
  EXPECT_NE(mapping_at(f64.data_ptr()).file.find("map.safetensors"), std::string::npos);
  expect_same_tensor(f64, sd.at("float64"), "float64");
}

TEST_F(Safetensors, WritingIntoALoadedTensorLeavesTheFileUnchanged) {
  StateDict sd;
  sd.set("w", sample(kFloat32));
  sd.set("i", sample(kInt64));
  save_safetensors(path("cow.safetensors"), sd);
  const std::string before = read_file(path("cow.safetensors"));
  for (const SafetensorsLoad how : {SafetensorsLoad::kCopy, SafetensorsLoad::kMap}) {
    StateDict loaded = load_safetensors(path("cow.safetensors"), Device::cpu(), how);
    Tensor w = loaded.at("w");
    w.fill_(42);
    loaded.at("i").data<int64_t>()[0] = -1;
    EXPECT_EQ(w.to_vector<float>(), std::vector<float>(6, 42.f));
    EXPECT_EQ(read_file(path("cow.safetensors")), before);
    const StateDict again = load_safetensors(path("cow.safetensors"), Device::cpu(), how);
    expect_same_tensor(again.at("w"), sd.at("w"), "w");
    expect_same_tensor(again.at("i"), sd.at("i"), "i");
  }
}

// Rewrites the file in place, as cp or Python's save_file do: same inode,
// truncated, then written.
void rewrite_in_place(const std::string& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Loaded tensors are the program's (the default copies): another program
// rewriting or truncating the file changes nothing in them and breaks nothing.
TEST_F(Safetensors, LoadedTensorsStayTheProgramsWhenTheFileIsRewritten) {
  const StateDict a = save_a_and_b();
  StateDict loaded = load_safetensors(path("a.safetensors"));
  loaded.at("w").data<float>()[0] = 123;  // the program's own write
  rewrite_in_place(path("a.safetensors"), read_file(path("b.safetensors")));
  std::vector<float> want = a.at("w").to_vector<float>();
  want[0] = 123;
  EXPECT_EQ(loaded.at("w").to_vector<float>(), want);
  rewrite_in_place(path("a.safetensors"), "");
  EXPECT_EQ(loaded.at("w").to_vector<float>(), want);
}

// A file object reads at get(): a file that shrank since it was opened is an
// IOError naming it, never short or stale data.
TEST_F(Safetensors, AFileTruncatedAfterOpeningIsAnErrorAtGet) {
  StateDict sd;
  sd.set("w", sample(kFloat32, {64, 64}));
  save_safetensors(path("t.safetensors"), sd);
  const SafetensorsFile file(path("t.safetensors"));
  ASSERT_EQ(::truncate(path("t.safetensors").c_str(), 200), 0);
  expect_error_with<IOError>([&] { file.get("w"); },
                             {path("t.safetensors"), "truncated or rewrote it"});
}

// Why mapping is the explicit choice: pages the program has not written show
// another program's in-place rewrite (Linux shares them with the page cache).
TEST_F(Safetensors, MappedTensorsShowAnInPlaceRewriteAsDocumented) {
  const StateDict a = save_a_and_b();
  const StateDict mapped =
      load_safetensors(path("a.safetensors"), Device::cpu(), SafetensorsLoad::kMap);
  expect_same_tensor(mapped.at("w"), a.at("w"), "w");
  rewrite_in_place(path("a.safetensors"), read_file(path("b.safetensors")));
  expect_same_tensor(mapped.at("w"), sample(kFloat32, {64, 64}).neg(), "w");
}

// Bytes written by hand from the format's spec, as PyTorch's writer lays them
// out, but with a header length that leaves the buffer off 8-byte alignment
// (trailing spaces allowed by the spec): every tensor is copied.
TEST_F(Safetensors, ReadsAHandWrittenFileWithAnUnalignedHeader) {
  std::string json =
      R"({"__metadata__":{"format":"pt"},"bias":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
      R"( "weight":{"dtype":"F16","shape":[2,1],"data_offsets":[12,16]},)"
      R"("step":{"dtype":"I64","shape":[],"data_offsets":[16,24]}})";
  json += (json.size() % 2 ? "  " : "   ");  // an odd buffer start misaligns every dtype
  ASSERT_EQ((8 + json.size()) % 2, 1u);
  const std::string data(
      "\0\0\xc0\x3f"
      "\0\0\0\xc0"
      "\0\0\x80\x3e"  // 1.5f, -2.0f, 0.25f
      "\0\x3c"
      "\0\xc0"  // half 1.0, -2.0
      "\x2a\0\0\0\0\0\0\0",
      24);  // int64 42
  write_file(path("pt.safetensors"), file_bytes(json, data));

  const StateDict sd = load_safetensors(path("pt.safetensors"));
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"bias", "weight", "step"}));
  EXPECT_EQ(sd.at("bias").to_vector<float>(), (std::vector<float>{1.5f, -2.f, 0.25f}));
  EXPECT_EQ(sd.at("weight").dtype(), kFloat16);
  EXPECT_EQ(sd.at("weight").sizes(), (Shape{2, 1}));
  EXPECT_EQ(sd.at("weight").to_vector<float>(), (std::vector<float>{1.f, -2.f}));
  EXPECT_EQ(sd.at("step").dim(), 0);
  EXPECT_EQ(sd.at("step").item<int64_t>(), 42);
  for (const auto& [name, t] : sd) {
    EXPECT_EQ(mapping_at(t.data_ptr()).file.find("pt.safetensors"), std::string::npos) << name;
  }
  EXPECT_EQ(SafetensorsFile(path("pt.safetensors")).metadata().at("format"), "pt");
}

TEST_F(Safetensors, SkipsUnknownEntryKeysAndAcceptsGapsInTheBuffer) {
  const std::string json =
      R"({"a":{"dtype":"I8","shape":[2],"data_offsets":[3,5],"note":{"x":[1,[2]]},"n":null}})";
  write_file(path("gap.safetensors"), file_bytes(json, std::string("\0\0\0\x05\xfb", 5)));
  EXPECT_EQ(load_safetensors(path("gap.safetensors")).at("a").to_vector<int>(),
            (std::vector<int>{5, -5}));
}

// --- lazy access ----------------------------------------------------------------

TEST_F(Safetensors, FileGivesNamesInfoAndSingleTensors) {
  StateDict sd;
  sd.set("fc.weight", sample(kBFloat16, {3, 2}));
  sd.set("fc.bias", sample(kFloat64, {3}));
  save_safetensors(path("lazy.safetensors"), sd, {{"epoch", "7"}});
  const SafetensorsFile f(path("lazy.safetensors"));
  EXPECT_EQ(f.path(), path("lazy.safetensors"));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_TRUE(f.contains("fc.bias"));
  EXPECT_FALSE(f.contains("fc"));
  EXPECT_EQ(f.metadata().at("epoch"), "7");
  const SafetensorsTensorInfo info = f.info("fc.weight");
  EXPECT_EQ(info.dtype, kBFloat16);
  EXPECT_EQ(info.shape, (Shape{3, 2}));
  EXPECT_EQ(info.nbytes, 12u);
  expect_same_tensor(f.get("fc.bias"), sd.at("fc.bias"), "fc.bias");
  expect_error_with<ValueError>([&] { f.get("fc.gamma"); }, {path("lazy.safetensors"), "fc.gamma"});
  expect_error_with<ValueError>([&] { f.info("x"); }, {path("lazy.safetensors"), "'x'"});
}

// --- atomic saves ---------------------------------------------------------------

TEST_F(Safetensors, SaveIntoAMissingDirectoryLeavesNothing) {
  StateDict sd;
  sd.set("w", sample(kFloat32));
  const std::string p = path("missing/net.safetensors");
  expect_error_with<IOError>([&] { save_safetensors(p, sd); }, {"save_safetensors", p});
  EXPECT_TRUE(dir_entries().empty());
}

// Root writes into read-only directories, so as root (as CI runs) the save
// runs in a child process that first drops to the unprivileged user nobody.
TEST_F(Safetensors, SaveIntoAReadOnlyDirectoryLeavesTheOldFile) {
  StateDict sd;
  sd.set("w", sample(kFloat32));
  save_safetensors(path("net.safetensors"), sd);
  const std::string before = read_file(path("net.safetensors"));
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                            fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  sd.set("w", sample(kInt8));
  const auto refused = [&] {
    try {
      save_safetensors(path("net.safetensors"), sd);
    } catch (const IOError& e) {
      return std::string(e.what()).find(path("net.safetensors")) != std::string::npos;
    }
    return false;
  };
  if (::geteuid() != 0) {
    EXPECT_TRUE(refused());
  } else {
    const pid_t child = ::fork();
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
      ::_exit(refused() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "root cannot become the user nobody here";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the save as nobody was not refused";
  }
  fs::permissions(dir_, fs::perms::owner_all);
  EXPECT_EQ(read_file(path("net.safetensors")), before);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"net.safetensors"});
}

// A write that fails half-way (here: past the file size limit) removes the
// temporary and never touches the existing file.
TEST_F(Safetensors, FailedWriteLeavesTheOldFileAndNoTemporary) {
  StateDict small, big;
  small.set("w", sample(kFloat32));
  big.set("w", zeros({1 << 16}));
  const std::string p = path("net.safetensors");
  save_safetensors(p, small);
  const std::string before = read_file(p);

  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit limit = old;
  limit.rlim_cur = 4096;
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);  // report EFBIG instead of killing us
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  expect_error_with<IOError>([&] { save_safetensors(p, big); }, {"save_safetensors", p, "write"});
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);

  EXPECT_EQ(read_file(p), before);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"net.safetensors"});
}

TEST_F(Safetensors, FailedRenameLeavesNoTemporary) {
  // A directory at the path is refused before anything is written.
  fs::create_directories(path("taken/inside"));
  StateDict sd;
  sd.set("w", sample(kFloat32));
  expect_error_with<IOError>([&] { save_safetensors(path("taken"), sd); },
                             {"save_safetensors", path("taken"), "Is a directory"});
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"taken"});
  // One that appears while the file is written makes the rename fail; the
  // new file goes with the error.
  io::AtomicFileWriter out(path("late"), "save_safetensors");
  out.write("data", 4);
  fs::create_directories(path("late/inside"));
  expect_error_with<IOError>([&] { out.commit(); }, {"save_safetensors", path("late"), "rename"});
  EXPECT_EQ(dir_entries(), (std::vector<std::string>{"late", "taken"}));
}

TEST_F(Safetensors, SaveReplacesAnExistingFile) {
  StateDict a, b;
  a.set("x", sample(kFloat32));
  b.set("y", sample(kInt16));
  save_safetensors(path("net.safetensors"), a);
  save_safetensors(path("net.safetensors"), b);
  EXPECT_EQ(load_safetensors(path("net.safetensors")).keys(), std::vector<std::string>{"y"});
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"net.safetensors"});
}

TEST_F(Safetensors, SaveRejectsTensorsItCannotWrite) {
  const std::string p = path("bad.safetensors");
  StateDict sd;
  sd.set("__metadata__", sample(kFloat32));
  expect_error_with<ValueError>([&] { save_safetensors(p, sd); }, {p, "__metadata__"});
  StateDict meta;
  meta.set("m", ops::make_tensor({2}, kFloat32, Device::cpu(), true));
  expect_error_with<ValueError>([&] { save_safetensors(p, meta); }, {"save_safetensors", p, "'m'"});
  StateDict bad_name;
  bad_name.set("w\xff", sample(kFloat32));
  expect_error_with<ValueError>([&] { save_safetensors(p, bad_name); }, {p, "UTF-8"});
  StateDict ok;
  ok.set("w", sample(kFloat32));
  expect_error_with<ValueError>(
      [&] {
        save_safetensors(p, ok, {{"k", "\xc0\x80"}});
      },
      {p, "metadata value", "UTF-8"});
  EXPECT_TRUE(dir_entries().empty());
}

// --- malformed files ------------------------------------------------------------

struct Malformed {
  const char* what;
  std::string bytes;
  std::vector<std::string> message;  // besides the file name
};

std::string deep(const std::string& open, const std::string& close, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += open;
  for (int i = 0; i < n; ++i) s += close;
  return s;
}

std::vector<Malformed> malformed_files() {
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  const std::string eight(8, '\0');
  auto entry = [](const std::string& body) { return R"({"w":{)" + body + "}}"; };
  std::string huge_len(8, '\0');
  huge_len[4] = 1;  // 2^32 bytes of header
  return {
      {"empty file", "", {"0 bytes", "shorter than the 8-byte header length"}},
      {"short file", "abc", {"3 bytes"}},
      {"header past the end", file_bytes("{}").substr(0, 9), {"header length 2 runs past the end"}},
      {"absurd header length", huge_len + "{}", {"header length 4294967296 exceeds", "100000000"}},
      {"invalid UTF-8", file_bytes("{\"w\xff\":{}}"), {"not valid UTF-8"}},
      {"invalid JSON", file_bytes("{\"w\":"), {"not valid JSON"}},
      {"trailing garbage", file_bytes("{} x"), {"not valid JSON"}},
      {"not an object", file_bytes("[1,2]"), {"is an array, not a JSON object"}},
      {"entry not an object", file_bytes(R"({"w":[1]})"), {"'w'", "an array, expected an object"}},
      {"missing dtype",
       file_bytes(entry(R"("shape":[],"data_offsets":[0,0])")),
       {"'w'", "'dtype' is missing"}},
      {"missing shape",
       file_bytes(entry(R"("dtype":"F32","data_offsets":[0,0])")),
       {"'w'", "'shape' is missing"}},
      {"missing offsets", file_bytes(entry(f32x2)), {"'w'", "'data_offsets' is missing"}},
      {"dtype not a string", file_bytes(entry(R"("dtype":7)")), {"'w'", "dtype is the number 7"}},
      {"shape not an array", file_bytes(entry(R"("shape":"2")")), {"'w'", "shape is a string"}},
      {"offsets not an array",
       file_bytes(entry(R"("data_offsets":{})")),
       {"'w'", "data_offsets is an object"}},
      {"unknown dtype", file_bytes(entry(R"("dtype":"X9")")), {"'w'", "'X9' is unknown"}},
      {"unsupported dtype",
       file_bytes(entry(R"("dtype":"F8_E4M3")")),
       {"'w'", "'F8_E4M3' is not supported"}},
      {"negative dim", file_bytes(entry(R"("shape":[2,-3])")), {"'w'", "negative number -3"}},
      {"fractional dim", file_bytes(entry(R"("shape":[2.5])")), {"'w'", "non-integer number 2.5"}},
      {"nested dim", file_bytes(entry(R"("shape":[[2]])")), {"'w'", "shape holds an array"}},
      {"overflowing shape",
       file_bytes(entry(R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0])")),
       {"'w'", "more elements than fit"}},
      {"one offset",
       file_bytes(entry(f32x2 + R"(,"data_offsets":[0])")),
       {"'w'", "data_offsets has 1 value, expected [begin, end]"}},
      {"three offsets",
       file_bytes(entry(f32x2 + R"(,"data_offsets":[0,8,8])")),
       {"'w'", "more than 2 values"}},
      {"negative offset",
       file_bytes(entry(f32x2 + R"(,"data_offsets":[-8,0])")),
       {"'w'", "data_offsets holds the negative"}},
      {"end before begin",
       file_bytes(entry(f32x2 + R"(,"data_offsets":[8,0])"), eight),
       {"'w'", "[8, 0] end before"}},
      {"end past the buffer",
       file_bytes(entry(f32x2 + R"(,"data_offsets":[4,12])"), eight),
       {"'w'", "[4, 12] run past the data buffer of 8 bytes"}},
      {"byte count mismatch",
       file_bytes(entry(f32x2 + R"(,"data_offsets":[0,4])"), eight),
       {"'w'", "hold 4 bytes, but shape [2] of F32 needs 8"}},
      {"overlap",
       file_bytes(R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"I16","shape":[2],"data_offsets":[6,10]}})",
                  eight + "ab"),
       {"'a' [0, 8] and 'b' [6, 10] overlap"}},
      {"metadata not an object",
       file_bytes(R"({"__metadata__":"x"})"),
       {"__metadata__ is a string"}},
      {"metadata not strings",
       file_bytes(R"({"__metadata__":{"epoch":3}})"),
       {"__metadata__ value of key 'epoch' is the number 3"}},
      {"duplicate metadata key",
       file_bytes(R"({"__metadata__":{"k":"a","k":"b"}})"),
       {"key 'k' twice"}},
      {"duplicate tensor",
       file_bytes(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"w":{}})"),
       {"tensor 'w' appears twice"}},
      {"duplicate entry key",
       file_bytes(entry(R"("dtype":"F32","dtype":"F32")")),
       {"'w'", "key 'dtype' appears twice"}},
      {"deep arrays", file_bytes(deep("[", "]", 100000)), {"is an array, not a JSON object"}},
      {"deep objects", file_bytes(deep("{\"a\":", "}", 100000)), {"nests JSON deeper than 32"}},
      {"deep unknown key",
       file_bytes(entry(R"("x":)" + deep("[", "]", 100000))),
       {"deeper than 32"}},
      {"BOOL byte not 0 or 1",
       file_bytes(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                  std::string("\x01\x00\x02", 3)),
       {"'m'", "BOOL element 2 is the byte 2, expected 0 or 1"}},
  };
}

TEST_F(Safetensors, RejectsEveryMalformedFileNamingFileAndTensor) {
  for (const auto& c : malformed_files()) {
    SCOPED_TRACE(c.what);
    const std::string p = path("bad.safetensors");
    write_file(p, c.bytes);
    std::vector<std::string> parts = c.message;
    parts.insert(parts.begin(), "safetensors file '" + p + "'");
    expect_error_with<IOError>([&] { load_safetensors(p); }, parts);
  }
}

TEST_F(Safetensors, RejectsWhatIsNotAReadableFile) {
  expect_error_with<IOError>([&] { load_safetensors(path("absent.safetensors")); },
                             {path("absent.safetensors"), "open"});
  expect_error_with<IOError>([&] { SafetensorsFile f(dir_); }, {dir_, "not a regular file"});
}

// A FIFO is refused at once (opening it used to wait for a writer forever),
// as is a device that would read without end.
TEST_F(Safetensors, RefusesAFifoAndADeviceWithoutBlocking) {
  const std::string fifo = path("pipe.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error_with<IOError>([&] { load_safetensors(fifo); }, {fifo, "not a regular file"});
  expect_error_with<IOError>([&] { load_safetensors("/dev/zero"); },
                             {"/dev/zero", "not a regular file"});
}

// The parser on its own: the header length is checked before anything is read
// or allocated, so a tiny input claiming a near-2^64-byte header is just rejected.
TEST(SafetensorsFormat, ChecksTheHeaderLengthBeforeReading) {
  const std::string bytes("\xf8\xff\xff\xff\xff\xff\xff\xff{}", 10);
  expect_error_with<IOError>([&] { io::parse_safetensors(bytes, "mem"); }, {"'mem'", "exceeds"});
}

TEST(SafetensorsFormat, EncodedHeadersParseBackToTheSameEntries) {
  std::vector<io::SafetensorsEntry> entries = {
      {"b", kFloat16, {3}, 0, 0}, {"a", kFloat64, {2, 1}, 0, 0}, {"e", kInt32, {0}, 0, 0}};
  const uint64_t size = io::lay_out_safetensors(entries);
  EXPECT_EQ(size, 22u);
  EXPECT_EQ(entries[1].begin, 0u);   // 8-byte elements first
  EXPECT_EQ(entries[2].begin, 16u);  // then 4-byte ones
  EXPECT_EQ(entries[0].begin, 16u);
  const std::string header = io::encode_safetensors_header(entries, {{"x", "y"}}, "mem");
  EXPECT_EQ(header.size() % 8, 0u);
  const auto parsed = io::parse_safetensors(header + std::string(size, '\0'), "mem");
  EXPECT_EQ(parsed.entries, entries);
  EXPECT_EQ(parsed.metadata, (std::map<std::string, std::string>{{"x", "y"}}));
  EXPECT_EQ(parsed.data_start, header.size());
  EXPECT_EQ(parsed.data_size, size);
}

}  // namespace
}  // namespace kiln
