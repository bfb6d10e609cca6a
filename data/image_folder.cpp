#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "core/parallel.h"

namespace stoke::data {
namespace {

constexpr const char* kImageFolderOp = "ImageFolderDataset";
namespace fs = std::filesystem;

bool is_image(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

// The image files under `dir`, in torchvision's order: sorted(os.walk(dir)) visits directories
// by path, and each directory's files are sorted by name.
std::vector<std::string> scan_class(const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> found;  // (directory, file name)
  const auto opts = fs::directory_options::follow_directory_symlink;
  for (auto it = fs::recursive_directory_iterator(dir, opts);
       it != fs::recursive_directory_iterator(); ++it) {
    if (!it->is_regular_file() || !is_image(it->path())) continue;
    found.emplace_back(it->path().parent_path().string(), it->path().filename().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> files;
  files.reserve(found.size());
  for (const auto& [d, f] : found) files.push_back((fs::path(d) / f).string());
  return files;
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, ImageFolderOptions options)
    : root_(root),
      decode_{.max_width = options.max_width,
              .max_height = options.max_height,
              .channels = options.channels} {
  STOKE_CHECK(options.channels == 0 || options.channels == 1 || options.channels == 3,
              kImageFolderOp, "expected channels 0 (as stored), 1 or 3, got ", options.channels);
  STOKE_CHECK(fs::is_directory(root), kImageFolderOp, "root '", root, "' ",
              fs::exists(root) ? "is not a directory" : "does not exist");
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  STOKE_CHECK(!classes_.empty(), kImageFolderOp, "root '", root,
              "' has no class directories (expected root/<class>/<image files>)");
  for (size_t c = 0; c < classes_.size(); ++c) {
    const fs::path dir = fs::path(root) / classes_[c];
    std::vector<std::string> files = scan_class(dir);
    STOKE_CHECK(!files.empty(), kImageFolderOp, "class directory '", dir.string(),
                "' has no image files (.png, .jpg, .jpeg, .bmp)");
    for (auto& f : files) {
      files_.push_back(std::move(f));
      labels_.push_back(static_cast<int32_t>(c));
    }
  }
}

const std::string& ImageFolderDataset::path(int64_t index) const {
  STOKE_CHECK(index >= 0 && index < size(), kImageFolderOp, "index ", index, " out of range [0, ",
              size(), ") for root '", root_, "'");
  return files_[static_cast<size_t>(index)];
}

int64_t ImageFolderDataset::label(int64_t index) const {
  path(index);  // range check
  return labels_[static_cast<size_t>(index)];
}

void ImageFolderDataset::decode(int64_t index, const uint8_t* data, size_t size,
                                Example& out) const {
  const std::string& file = path(index);
  try {
    decode_image(data, size, file, decode_, out);
  } catch (const Error& e) {
    // The message already names the file; the dataset contract also wants the index.
    STOKE_FAIL(kImageFolderOp, "sample ", index, ": ", e.what());
  }
  out.label = labels_[static_cast<size_t>(index)];
}

void ImageFolderDataset::get(int64_t index, Example& out) const {
  // One file buffer per thread: after warm-up, reading allocates nothing.
  thread_local std::vector<uint8_t> bytes;
  const std::string& file = path(index);
  try {
    read_file_bytes(file, bytes);
  } catch (const Error& e) {
    STOKE_FAIL(kImageFolderOp, "sample ", index, ": ", e.what());
  }
  decode(index, bytes.data(), bytes.size(), out);
}

int64_t write_image_folder(const Dataset& dataset, const std::string& root, ExportOptions options) {
  constexpr const char* kExport = "write_image_folder";
  STOKE_CHECK(options.limit >= 0, kExport, "expected limit >= 0, got ", options.limit);
  const int64_t n = options.limit > 0 ? std::min(options.limit, dataset.size()) : dataset.size();
  const int64_t classes = dataset.num_classes();
  std::vector<std::string> names = dataset.class_names();
  // Names are used only when reading the folder back gives the same labels: one per class,
  // strictly ascending (ImageFolderDataset sorts them) and each a plain directory name.
  bool usable =
      static_cast<int64_t>(names.size()) == classes &&
      std::adjacent_find(names.begin(), names.end(), std::greater_equal<>()) == names.end();
  for (const auto& name : names)
    usable = usable && !name.empty() && name != "." && name != ".." &&
             name.find('/') == std::string::npos;
  if (!usable) {
    const int width = static_cast<int>(std::to_string(std::max<int64_t>(classes - 1, 0)).size());
    names.clear();
    for (int64_t c = 0; c < classes; ++c) {
      std::string s = std::to_string(c);
      names.push_back(std::string(static_cast<size_t>(width) - s.size(), '0') + s);
    }
  }
  for (const auto& name : names) fs::create_directories(fs::path(root) / name);
  const size_t index_width = std::to_string(std::max<int64_t>(n - 1, 0)).size();
  parallel_for(0, n, 16, [&](int64_t b, int64_t e) {
    Example ex;
    for (int64_t i = b; i < e; ++i) {
      dataset.get(i, ex);
      STOKE_CHECK(ex.label >= 0 && ex.label < classes, kExport, dataset.describe(i), ": label ",
                  ex.label, " out of range [0, ", classes, ")");
      const std::vector<uint8_t> png =
          encode_png(ex.pixels.data(), ex.height, ex.width, ex.channels);
      std::string file = std::to_string(i);
      file.insert(0, index_width - file.size(), '0');
      file += ".png";
      const fs::path path = fs::path(root) / names[static_cast<size_t>(ex.label)] / file;
      write_file_atomic(path.string(), png.data(), png.size());
    }
  });
  return n;
}

}  // namespace stoke::data
