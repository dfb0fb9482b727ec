// Tests of eagercomm_sgd_data: the IDX reader and its validation, the Fashion-MNIST loader
// (fixtures always; the real files when Debian's dataset-fashion-mnist is installed), epoch
// sharding, and the synthetic sequence task.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "sgd/data/fashion_mnist.h"
#include "sgd/data/idx_file.h"
#include "sgd/data/sequence_task.h"
#include "sgd/data/sharding.h"

namespace eagercomm::sgd {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("sgd_data_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

IdxArray make_images(uint32_t n, uint32_t rows, uint32_t cols) {
  IdxArray a;
  a.dims = {n, rows, cols};
  a.data.resize(size_t{n} * rows * cols);
  // Not a repeating byte pattern, so chunking mistakes in the reader would show.
  uint32_t x = 12345;
  for (auto& b : a.data) {
    x = x * 1103515245u + 12345u;
    b = static_cast<uint8_t>(x >> 16);
  }
  return a;
}

IdxArray make_labels(uint32_t n, int classes = 10) {
  IdxArray a;
  a.dims = {n};
  for (uint32_t i = 0; i < n; ++i) a.data.push_back(static_cast<uint8_t>((i * 7 + 3) % classes));
  return a;
}

// IDX bytes with an arbitrary header: magic, then the sizes, then `payload` bytes of data.
std::vector<uint8_t> raw_idx(uint32_t magic, const std::vector<uint32_t>& dims, size_t payload) {
  std::vector<uint8_t> b;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  b.resize(b.size() + payload, 0x5a);
  return b;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void put_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  ASSERT_TRUE(write_file_bytes(path, bytes, false).ok());
}

// The error of reading `path`, which must fail with kInvalidArgument and name the file.
std::string idx_error(const std::string& path, int expected_dims = 0) {
  auto r = read_idx_file(path, expected_dims);
  EXPECT_FALSE(r.ok()) << path << " was accepted";
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().to_string();
  return r.status().message();
}

// ---------------------------------------------------------------------------------------------
// IDX files

TEST(IdxFile, RoundTripPlainAndGzip) {
  TempDir dir;
  const IdxArray images = make_images(7, 28, 28);
  const IdxArray labels = make_labels(7);
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string ip = dir.file(gzip ? "images.gz" : "images");
    const std::string lp = dir.file(gzip ? "labels.gz" : "labels");
    ASSERT_TRUE(write_idx_file(ip, images, gzip).ok());
    ASSERT_TRUE(write_idx_file(lp, labels, gzip).ok());
    const auto head = file_bytes(ip);
    ASSERT_GE(head.size(), 4u);
    EXPECT_EQ(head[0] == 0x1f && head[1] == 0x8b, gzip);

    auto ri = read_idx_file(ip, 3);
    ASSERT_TRUE(ri.ok()) << ri.status().to_string();
    EXPECT_EQ(ri->dims, images.dims);
    EXPECT_EQ(ri->data, images.data);
    EXPECT_EQ(ri->element_count(), 7u * 28 * 28);
    auto rl = read_idx_file(lp, 1);
    ASSERT_TRUE(rl.ok()) << rl.status().to_string();
    EXPECT_EQ(rl->dims, labels.dims);
    EXPECT_EQ(rl->data, labels.data);
    // expected_dims 0 accepts any count.
    EXPECT_TRUE(read_idx_file(ip).ok());
  }
}

TEST(IdxFile, LargeGzipCrossesReaderChunks) {
  TempDir dir;
  const IdxArray images = make_images(1500, 28, 28);  // 1.2 MB: several 256 KiB chunks
  ASSERT_TRUE(write_idx_file(dir.file("big.gz"), images, true).ok());
  auto r = read_idx_file(dir.file("big.gz"), 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->data, images.data);
}

TEST(IdxFile, ConcatenatedGzipMembersAreOneFile) {
  TempDir dir;
  const std::vector<uint8_t> all = raw_idx(0x00000801, {6}, 0);
  std::vector<uint8_t> idx = all;
  for (uint8_t i = 0; i < 6; ++i) idx.push_back(i);
  // Split the IDX bytes over two gzip members, as `cat a.gz b.gz` makes.
  const std::vector<uint8_t> first(idx.begin(), idx.begin() + 7);
  const std::vector<uint8_t> second(idx.begin() + 7, idx.end());
  ASSERT_TRUE(write_file_bytes(dir.file("a.gz"), first, true).ok());
  ASSERT_TRUE(write_file_bytes(dir.file("b.gz"), second, true).ok());
  std::vector<uint8_t> cat = file_bytes(dir.file("a.gz"));
  const auto b = file_bytes(dir.file("b.gz"));
  cat.insert(cat.end(), b.begin(), b.end());
  put_bytes(dir.file("ab.gz"), cat);
  auto r = read_idx_file(dir.file("ab.gz"), 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->data, (std::vector<uint8_t>{0, 1, 2, 3, 4, 5}));
}

TEST(IdxFile, EachHeaderCorruptionIsNamed) {
  TempDir dir;
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    int expected_dims;
    const char* says;
  };
  std::vector<uint8_t> short_magic = {0, 0, 8};
  std::vector<uint8_t> short_header = raw_idx(0x00000803, {10, 28}, 0);
  const std::vector<Case> cases = {
      {"empty", {}, 0, "is empty"},
      {"short_magic", short_magic, 0, "ends inside the 4-byte magic"},
      {"bad_magic", raw_idx(0x12345678, {}, 16), 0, "not an IDX file: bad magic 0x12345678"},
      {"float_type", raw_idx(0x00000D01, {4}, 16), 1, "element type byte 0x0d (float32)"},
      {"labels_as_images", raw_idx(0x00000801, {4}, 4), 3, "has 1 dimensions"},
      {"images_as_labels", raw_idx(0x00000803, {1, 2, 2}, 4), 1, "has 3 dimensions"},
      {"zero_dims", raw_idx(0x00000800, {}, 0), 0, "has 0 dimensions"},
      {"absurd_dims", raw_idx(0x00000803, {0xffffffffu, 28, 28}, 64), 3, "absurd dimensions"},
      {"short_header", short_header, 3, "header ends after 2 of its 3 dimension sizes"},
      {"truncated_data", raw_idx(0x00000803, {10, 28, 28}, 7839), 3,
       "truncated: 7839 of the 7840 data bytes"},
      {"trailing_garbage", raw_idx(0x00000801, {10}, 13), 1, "3 trailing bytes"},
  };
  for (bool gzip : {false, true}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.name) + (gzip ? " (gzip)" : " (plain)"));
      const std::string path = dir.file(std::string(c.name) + (gzip ? ".gz" : ""));
      ASSERT_TRUE(write_file_bytes(path, c.bytes, gzip).ok());
      const std::string msg = idx_error(path, c.expected_dims);
      EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    }
  }
}

TEST(IdxFile, EachGzipCorruptionIsNamed) {
  TempDir dir;
  const IdxArray images = make_images(50, 28, 28);
  const std::string good = dir.file("good.gz");
  ASSERT_TRUE(write_idx_file(good, images, true).ok());
  const std::vector<uint8_t> bytes = file_bytes(good);

  // Cut in the middle of the deflate data.
  const std::string cut = dir.file("cut.gz");
  put_bytes(cut, std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  EXPECT_NE(idx_error(cut).find("gzip stream ends without its trailer"), std::string::npos);

  // The trailer's CRC-32 no longer matches the data.
  std::vector<uint8_t> bad_crc = bytes;
  bad_crc[bad_crc.size() - 8] ^= 0xff;
  const std::string crc = dir.file("crc.gz");
  put_bytes(crc, bad_crc);
  EXPECT_NE(idx_error(crc).find("is corrupt"), std::string::npos);

  // Junk after a complete gzip member (gzread would ignore it).
  std::vector<uint8_t> junk = bytes;
  for (char ch : std::string("not gzip")) junk.push_back(static_cast<uint8_t>(ch));
  const std::string tail = dir.file("tail.gz");
  put_bytes(tail, junk);
  EXPECT_NE(idx_error(tail).find("trailing garbage after the end of its gzip stream"),
            std::string::npos);
}

TEST(IdxFile, MissingFileIsAnIoError) {
  TempDir dir;
  const std::string path = dir.file("nope");
  auto r = read_idx_file(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_NE(r.status().message().find(path), std::string::npos);
  EXPECT_NE(r.status().message().find("No such file"), std::string::npos);
}

TEST(IdxFile, WriteRejectsInconsistentArrays) {
  TempDir dir;
  IdxArray a = make_images(2, 3, 3);
  a.data.pop_back();
  EXPECT_EQ(write_idx_file(dir.file("x"), a, false).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_idx_file(dir.file("y"), IdxArray{}, false).code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Fashion-MNIST loader on fixtures

// Writes a Fashion-MNIST-shaped split into `dir`.
void write_split(const TempDir& dir, const std::string& prefix, const IdxArray& images,
                 const IdxArray& labels, bool gzip) {
  const std::string ext = gzip ? ".gz" : "";
  ASSERT_TRUE(write_idx_file(dir.file(prefix + "-images-idx3-ubyte" + ext), images, gzip).ok());
  ASSERT_TRUE(write_idx_file(dir.file(prefix + "-labels-idx1-ubyte" + ext), labels, gzip).ok());
}

TEST(FashionMnist, MissingDirectoryGivesThePackageHint) {
  TempDir dir;
  const std::string missing = dir.file("no-such-dir");
  auto r = load_fashion_mnist(Split::kTrain, missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find(missing + "/train-images-idx3-ubyte"), std::string::npos) << msg;
  EXPECT_NE(msg.find("install Debian's dataset-fashion-mnist package (apt-get install "
                     "dataset-fashion-mnist)"),
            std::string::npos)
      << msg;
}

TEST(FashionMnist, MissingLabelFileIsNamed) {
  TempDir dir;
  ASSERT_TRUE(
      write_idx_file(dir.file("t10k-images-idx3-ubyte.gz"), make_images(3, 28, 28), true).ok());
  auto r = load_fashion_mnist(Split::kTest, dir.str());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("t10k-labels-idx1-ubyte"), std::string::npos);
  EXPECT_NE(r.status().message().find("apt-get install dataset-fashion-mnist"), std::string::npos);
}

TEST(FashionMnist, LoadsAndNormalisesFixtures) {
  TempDir dir;
  IdxArray images = make_images(5, 28, 28);
  images.data[0] = 0;
  images.data[1] = 255;
  const IdxArray labels = make_labels(5);
  write_split(dir, "train", images, labels, /*gzip=*/true);
  write_split(dir, "t10k", images, labels, /*gzip=*/false);  // gunzipped copies work too
  for (Split split : {Split::kTrain, Split::kTest}) {
    SCOPED_TRACE(split_name(split));
    auto r = load_fashion_mnist(split, dir.str());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const Dataset& d = *r;
    EXPECT_EQ(d.n, 5u);
    EXPECT_EQ(d.rows, 28u);
    EXPECT_EQ(d.cols, 28u);
    ASSERT_EQ(d.images.size(), 5u * 784);
    ASSERT_EQ(d.labels.size(), 5u);
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(d.labels[i], labels.data[i]);
    EXPECT_NEAR(d.images[0], -kFashionMnistMean / kFashionMnistStd, 1e-5);
    EXPECT_NEAR(d.images[1], (1.0f - kFashionMnistMean) / kFashionMnistStd, 1e-5);
    for (size_t i = 0; i < d.images.size(); ++i) {
      ASSERT_NEAR(d.images[i], (images.data[i] / 255.0f - kFashionMnistMean) / kFashionMnistStd,
                  1e-5);
    }
    const Dataset s = subset(d, 2);
    EXPECT_EQ(s.n, 2u);
    EXPECT_EQ(s.images, std::vector<float>(d.images.begin(), d.images.begin() + 2 * 784));
    EXPECT_EQ(s.labels, std::vector<int64_t>(d.labels.begin(), d.labels.begin() + 2));
    EXPECT_EQ(subset(d, 100).n, 5u);
    EXPECT_EQ(d.image(3), d.images.data() + 3 * 784);
  }
}

TEST(FashionMnist, RejectsInconsistentFixtures) {
  {
    TempDir dir;  // 10 is not a class
    auto labels = make_labels(3);
    labels.data[2] = 10;
    write_split(dir, "train", make_images(3, 28, 28), labels, true);
    auto r = load_fashion_mnist(Split::kTrain, dir.str());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("label 2"), std::string::npos) << r.status().to_string();
  }
  {
    TempDir dir;
    write_split(dir, "train", make_images(3, 28, 28), make_labels(4), true);
    auto r = load_fashion_mnist(Split::kTrain, dir.str());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("3 images but"), std::string::npos);
  }
  {
    TempDir dir;
    write_split(dir, "train", make_images(3, 32, 32), make_labels(3), true);
    auto r = load_fashion_mnist(Split::kTrain, dir.str());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("32x32, expected 28x28"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------------
// The real Fashion-MNIST, when installed

TEST(FashionMnist, RealDataWhenInstalled) {
  if (!fs::exists(fs::path(kFashionMnistDefaultDir) / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << kFashionMnistDefaultDir
                 << " (apt-get install dataset-fashion-mnist)";
  }
  auto train = load_fashion_mnist(Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status().to_string();
  auto test = load_fashion_mnist(Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status().to_string();
  EXPECT_EQ(train->n, 60000u);
  EXPECT_EQ(test->n, 10000u);
  ASSERT_EQ(train->images.size(), 60000u * 784);
  ASSERT_EQ(test->labels.size(), 10000u);
  // The first training labels of the published data set: ankle boot, T-shirt, T-shirt, dress.
  EXPECT_EQ(std::vector<int64_t>(train->labels.begin(), train->labels.begin() + 4),
            (std::vector<int64_t>{9, 0, 0, 3}));
  for (const Dataset* d : {&*train, &*test}) {
    std::vector<size_t> per_class(10, 0);
    for (int64_t l : d->labels) {
      ASSERT_GE(l, 0);
      ASSERT_LT(l, 10);
      ++per_class[static_cast<size_t>(l)];
    }
    // Both splits are exactly balanced.
    for (size_t c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], d->n / 10) << "class " << c;
  }
  // The normalisation constants are the training set's: mean ~0, standard deviation ~1.
  double sum = 0, sum_sq = 0;
  for (float v : train->images) {
    sum += v;
    sum_sq += double{v} * v;
  }
  const double mean = sum / static_cast<double>(train->images.size());
  const double std_dev =
      std::sqrt(sum_sq / static_cast<double>(train->images.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std_dev, 1.0, 0.01);
}

// ---------------------------------------------------------------------------------------------
// Sharding

TEST(Sharding, PermutationIsAPermutation) {
  for (size_t n : {0u, 1u, 2u, 17u, 1000u}) {
    std::vector<size_t> p = epoch_permutation(n, 7, 3);
    std::sort(p.begin(), p.end());
    std::vector<size_t> iota(n);
    std::iota(iota.begin(), iota.end(), size_t{0});
    EXPECT_EQ(p, iota) << "n " << n;
  }
}

TEST(Sharding, PermutationIsPinned) {
  // mt19937_64's output is fixed by the standard and the shuffle is ours, so this holds for
  // every compiler and library: ranks built differently still agree.
  const std::vector<size_t> expected = epoch_permutation(10, 42, 0);
  const std::vector<size_t> pinned = {7, 8, 3, 6, 5, 0, 9, 4, 2, 1};
  EXPECT_EQ(expected, pinned);
}

TEST(Sharding, SharesAreDisjointEqualAndFromOnePermutation) {
  const size_t n = 1003;
  const int size = 4;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const std::vector<size_t> perm = epoch_permutation(n, 99, epoch);
    std::vector<size_t> joined;
    std::set<size_t> seen;
    for (int rank = 0; rank < size; ++rank) {
      // Each rank computes its share on its own.
      const std::vector<size_t> share = epoch_shard(n, rank, size, 99, epoch);
      EXPECT_EQ(share.size(), shard_size(n, size));
      EXPECT_EQ(share.size(), 250u);
      for (size_t i : share) EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
      joined.insert(joined.end(), share.begin(), share.end());
    }
    // The shares are the permutation's prefix; the n mod size = 3 last ids sit out.
    EXPECT_EQ(joined, std::vector<size_t>(perm.begin(), perm.begin() + 1000));
  }
}

TEST(Sharding, EpochsAndSeedsDiffer) {
  const auto e0 = epoch_shard(10000, 1, 4, 5, 0);
  const auto e1 = epoch_shard(10000, 1, 4, 5, 1);
  const auto s1 = epoch_shard(10000, 1, 4, 6, 0);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, s1);
  EXPECT_EQ(e0, epoch_shard(10000, 1, 4, 5, 0));
  // Different epochs drop different samples: over a few epochs every sample is seen.
  std::set<size_t> seen;
  for (uint64_t epoch = 0; epoch < 20; ++epoch) {
    for (int rank = 0; rank < 3; ++rank) {
      for (size_t i : epoch_shard(10, rank, 3, 5, epoch)) seen.insert(i);
    }
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(Sharding, PermutationsAreUniform) {
  // All 24 orders of 4 items, each about 1/24 of the time.
  std::map<std::vector<size_t>, int> count;
  const int trials = 24000;
  for (int e = 0; e < trials; ++e) ++count[epoch_permutation(4, 1, static_cast<uint64_t>(e))];
  EXPECT_EQ(count.size(), 24u);
  for (const auto& [perm, c] : count) {
    EXPECT_GT(c, 850);
    EXPECT_LT(c, 1150);
  }
}

TEST(Sharding, DegenerateArguments) {
  EXPECT_TRUE(epoch_shard(3, 0, 4, 1, 0).empty());  // fewer samples than ranks: nothing to do
  EXPECT_TRUE(epoch_shard(100, 4, 4, 1, 0).empty());
  EXPECT_TRUE(epoch_shard(100, -1, 4, 1, 0).empty());
  EXPECT_TRUE(epoch_shard(100, 0, 0, 1, 0).empty());
  EXPECT_EQ(epoch_shard(100, 0, 1, 1, 0), epoch_permutation(100, 1, 0));
  EXPECT_EQ(shard_size(100, 0), 0u);
}

// ---------------------------------------------------------------------------------------------
// The sequence task

SequenceTask default_task(uint64_t seed = 1) {
  SequenceTaskOptions o;
  o.seed = seed;
  auto t = make_sequence_task(o);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

TEST(SequenceTask, Deterministic) {
  const SequenceTask a = default_task();
  const SequenceTask b = default_task();
  const SequenceTask other = default_task(2);
  int differ = 0;
  for (uint64_t i :
       {uint64_t{0}, uint64_t{1}, uint64_t{17}, uint64_t{123456789}, kSequenceTestIndexBase + 3}) {
    const SequenceSample sa = a.sample(i);
    const SequenceSample sb = b.sample(i);
    EXPECT_EQ(sa.length, sb.length);
    EXPECT_EQ(sa.label, sb.label);
    EXPECT_EQ(sa.features, sb.features);
    EXPECT_EQ(sa.length, a.length(i));
    EXPECT_EQ(sa.features.size(), sa.length * 8);
    EXPECT_EQ(a.sample(i).features, sa.features);  // no hidden state
    differ += other.sample(i).features != sa.features;
  }
  EXPECT_EQ(differ, 5);
}

TEST(SequenceTask, LengthsAreBoundedAndLongTailed) {
  const SequenceTask task = default_task();
  std::vector<size_t> lengths;
  for (uint64_t i = 0; i < 10000; ++i) lengths.push_back(task.length(i));
  for (size_t l : lengths) {
    ASSERT_GE(l, 8u);
    ASSERT_LE(l, 512u);
  }
  std::sort(lengths.begin(), lengths.end());
  const uint64_t total = std::accumulate(lengths.begin(), lengths.end(), uint64_t{0});
  const uint64_t top = std::accumulate(lengths.end() - 1000, lengths.end(), uint64_t{0});
  const double share = static_cast<double>(top) / static_cast<double>(total);
  EXPECT_GT(share, 0.25) << "the longest 10% hold " << share << " of the steps";
  // Both clips are reached, and the spread is wide (the point of the task).
  EXPECT_EQ(lengths.front(), 8u);
  EXPECT_EQ(lengths.back(), 512u);
  EXPECT_GT(lengths[9900], 4 * lengths[5000]);

  std::vector<size_t> batch = {0, 1, 2, 3, 4, 5, 6, 7};
  uint64_t steps = 0;
  for (size_t i : batch) steps += task.length(i);
  EXPECT_EQ(task.total_steps(batch), steps);
  EXPECT_EQ(task.total_steps({}), 0u);
}

TEST(SequenceTask, LabelsAreBalancedAndIndependentOfLength) {
  const SequenceTask task = default_task();
  std::vector<int> count(4, 0);
  std::vector<double> mean_len(4, 0);
  const int n = 10000;
  for (uint64_t i = 0; i < n; ++i) {
    const SequenceSample s = task.sample(i);
    ASSERT_GE(s.label, 0);
    ASSERT_LT(s.label, 4);
    ++count[s.label];
    mean_len[s.label] += static_cast<double>(s.length);
  }
  for (int c = 0; c < 4; ++c) {
    EXPECT_GT(count[c], n / 4 - 250) << "class " << c;
    EXPECT_LT(count[c], n / 4 + 250) << "class " << c;
    mean_len[c] /= count[c];
  }
  const auto [lo, hi] = std::minmax_element(mean_len.begin(), mean_len.end());
  EXPECT_LT(*hi / *lo, 1.15) << "the length predicts the class";
}

// Nearest-centroid classifiers fitted on training indices, scored on test indices: the mean
// over a sequence predicts the class well, its first step alone does not.
TEST(SequenceTask, LearnableFromTheSequenceNotFromTheFirstStep) {
  const SequenceTask task = default_task();
  const size_t dim = task.options().dim;
  const int classes = task.options().classes;
  auto features = [&](const SequenceSample& s, bool first_only) {
    std::vector<double> f(dim, 0.0);
    const size_t steps = first_only ? 1 : s.length;
    for (size_t t = 0; t < steps; ++t) {
      for (size_t d = 0; d < dim; ++d) f[d] += s.features[t * dim + d];
    }
    for (double& v : f) v /= static_cast<double>(steps);
    return f;
  };
  for (bool first_only : {false, true}) {
    std::vector<std::vector<double>> centroid(classes, std::vector<double>(dim, 0.0));
    std::vector<int> count(classes, 0);
    for (uint64_t i = 0; i < 2000; ++i) {
      const SequenceSample s = task.sample(i);
      const auto f = features(s, first_only);
      for (size_t d = 0; d < dim; ++d) centroid[s.label][d] += f[d];
      ++count[s.label];
    }
    for (int c = 0; c < classes; ++c) {
      for (double& v : centroid[c]) v /= count[c];
    }
    int correct = 0;
    const int tests = 1000;
    for (uint64_t i = 0; i < tests; ++i) {
      const SequenceSample s = task.sample(kSequenceTestIndexBase + i);
      const auto f = features(s, first_only);
      int best = 0;
      double best_dist = INFINITY;
      for (int c = 0; c < classes; ++c) {
        double dist = 0;
        for (size_t d = 0; d < dim; ++d) dist += (f[d] - centroid[c][d]) * (f[d] - centroid[c][d]);
        if (dist < best_dist) best_dist = dist, best = c;
      }
      correct += best == s.label;
    }
    const double accuracy = static_cast<double>(correct) / tests;
    std::printf("nearest centroid of the %s: accuracy %.3f\n",
                first_only ? "first step" : "sequence mean", accuracy);
    if (first_only) {
      EXPECT_LT(accuracy, 0.6) << "the first step alone gives the class away";
      EXPECT_GT(accuracy, 0.3) << "the first step carries no signal at all";
    } else {
      EXPECT_GT(accuracy, 0.85) << "the sequence mean does not predict the class";
    }
  }
}

TEST(SequenceTask, PatternsAreDistinctUnitVectors) {
  const SequenceTask task = default_task();
  std::set<std::vector<float>> patterns;
  for (int c = 0; c < 4; ++c) {
    const auto p = task.pattern(c);
    double norm = 0;
    for (float v : p) norm += double{v} * v;
    EXPECT_NEAR(norm, 1.0, 1e-6);
    patterns.insert(std::vector<float>(p.begin(), p.end()));
  }
  EXPECT_EQ(patterns.size(), 4u);
}

TEST(SequenceTask, BadOptionsAreRejected) {
  struct Case {
    const char* name;
    void (*edit)(SequenceTaskOptions&);
    const char* says;
  };
  const std::vector<Case> cases = {
      {"min_len 0", [](SequenceTaskOptions& o) { o.min_len = 0; }, "min_len"},
      {"max < min", [](SequenceTaskOptions& o) { o.max_len = 4; },
       "max_len 4 must be >= min_len 8"},
      {"huge max", [](SequenceTaskOptions& o) { o.max_len = kSequenceMaxLen + 1; }, "max_len"},
      {"dim 0", [](SequenceTaskOptions& o) { o.dim = 0; }, "dim 0"},
      {"1 class", [](SequenceTaskOptions& o) { o.classes = 1; }, "classes 1"},
      {"too many classes", [](SequenceTaskOptions& o) { o.classes = 17; }, "classes 17"},
      {"median 0", [](SequenceTaskOptions& o) { o.median_len = 0; }, "median_len"},
      {"sigma < 0", [](SequenceTaskOptions& o) { o.length_sigma = -1; }, "length_sigma"},
      {"no signal", [](SequenceTaskOptions& o) { o.signal = 0; }, "signal"},
      {"nan signal", [](SequenceTaskOptions& o) { o.signal = NAN; }, "signal"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SequenceTaskOptions o;
    c.edit(o);
    auto r = make_sequence_task(o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().to_string();
  }
  // Edge values that are fine: fixed length, one feature with two classes.
  SequenceTaskOptions o;
  o.min_len = o.max_len = 5;
  o.dim = 1;
  o.classes = 2;
  auto r = make_sequence_task(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->sample(3).length, 5u);
  EXPECT_EQ(r->sample(3).features.size(), 5u);
}

}  // namespace
}  // namespace eagercomm::sgd
