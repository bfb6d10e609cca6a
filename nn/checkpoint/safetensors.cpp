// safetensors reading and writing. The writer reproduces the reference library's layout byte for
// byte; the reader treats every file as hostile (see load_safetensors in the header).
#include "nn/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <unordered_set>

#include "core/error.h"
#include "core/files.h"

namespace stoke::nn {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; stoke copies it verbatim");

namespace {

using json = nlohmann::json;

constexpr const char* kSaveOp = "save_safetensors";
constexpr const char* kLoadOp = "load_safetensors";
constexpr const char* kMetadataKey = "__metadata__";
// The integrity check stoke writes into "__metadata__" (docs/data-formats.md, "Checkpoints").
constexpr const char* kChecksumKey = "stoke.crc32";
// The reference library refuses headers above 100 MB; so do we, before allocating one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// A dtype's name in the file and its rank in the reference library's Dtype enum, which orders
// dtypes by alignment: tensors are written by descending rank so that each one's data is aligned.
struct DTypeInfo {
  DType dtype;
  const char* name;
  int rank;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::boolean, "BOOL", 0}, {DType::u8, "U8", 1},   {DType::f16, "F16", 2},
    {DType::bf16, "BF16", 3},    {DType::i32, "I32", 4}, {DType::f32, "F32", 5},
    {DType::f64, "F64", 6},      {DType::i64, "I64", 7},
};

const DTypeInfo& info_of(DType dtype) {
  for (const DTypeInfo& d : kDTypes)
    if (d.dtype == dtype) return d;
  STOKE_FAIL(kSaveOp, "dtype ", dtype, " has no safetensors name");
}

const DTypeInfo* info_of(std::string_view name) {
  for (const DTypeInfo& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string errno_text() {
  return std::strerror(errno);
}

// A JSON string literal, escaped as serde_json (and nlohmann) escape: compact, raw UTF-8.
std::string quoted(const std::string& s, const std::string& path) {
  try {
    return json(s).dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception& e) {
    STOKE_FAIL(kSaveOp, path, ": name or metadata '", s, "' is not valid UTF-8 (", e.what(), ")");
  }
}

// Closes a descriptor on every path out of a function.
struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// pread until `n` bytes arrived; a file that ends early (truncated while we read) is an error.
void read_exact(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1u << 30));
    const ssize_t got = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    STOKE_CHECK(got >= 0, kLoadOp, path, ": read failed at byte ", offset, ": ", errno_text());
    STOKE_CHECK(got > 0, kLoadOp, path, ": unexpected end of file at byte ", offset,
                " (was the file truncated while being read?)");
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

// --- integrity check ------------------------------------------------------------------------
// "stoke.crc32" holds a compact JSON object: for each tensor, the CRC-32 (zlib's, 8 lowercase hex
// digits) of its name, dtype and shape ("name\0F32\02,3\0") followed by its data bytes; under
// "__metadata__", the CRC-32 of the other metadata as compact JSON with sorted keys. So a flipped
// data byte, a changed shape or dtype, swapped names or an edited metadata value all fail the
// check; safetensors readers that do not know the key (PyTorch's) ignore it.

std::string crc_hex(uLong crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08lx", crc & 0xffffffffUL);
  return buf;
}

std::string tensor_crc(const std::string& name, const char* dtype, const Shape& shape,
                       const void* data, uint64_t nbytes) {
  std::string desc = name + '\0' + dtype + '\0';
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d) desc += ',';
    desc += std::to_string(shape[d]);
  }
  desc += '\0';
  uLong crc = crc32_z(0L, reinterpret_cast<const Bytef*>(desc.data()), desc.size());
  if (nbytes > 0)
    crc = crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(nbytes));
  return crc_hex(crc);
}

// The metadata other than the checksum, as compact JSON with sorted keys.
std::string metadata_crc(const std::map<std::string, std::string>& metadata) {
  json m = json::object();
  for (const auto& [key, value] : metadata)
    if (key != kChecksumKey) m[key] = value;
  const std::string text = m.dump(-1, ' ', false, json::error_handler_t::replace);
  return crc_hex(crc32_z(0L, reinterpret_cast<const Bytef*>(text.data()), text.size()));
}

// --- writing ----------------------------------------------------------------------------------

struct WriteItem {
  const std::string* name;
  Tensor data;  // contiguous, detached
  const DTypeInfo* info;
  uint64_t nbytes;
};

// The JSON header, padded with spaces to a multiple of 8 bytes, in the reference layout:
// {"__metadata__":{...},"name":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},...}
std::string make_header(const std::vector<WriteItem>& items,
                        const std::map<std::string, std::string>& metadata,
                        const std::string& path) {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      if (!first) h += ',';
      first = false;
      h += quoted(key, path) + ':' + quoted(value, path);
    }
    h += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (const WriteItem& it : items) {
    if (!first) h += ',';
    first = false;
    h += quoted(*it.name, path) + ":{\"dtype\":\"" + it.info->name + "\",\"shape\":[";
    const Shape& shape = it.data.shape();
    for (size_t d = 0; d < shape.size(); ++d) {
      if (d) h += ',';
      h += std::to_string(shape[d]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + ',' +
         std::to_string(offset + it.nbytes) + "]}";
    offset += it.nbytes;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

// Owns the temporary file until commit: any exit before it closes and removes the file.
struct TempFile {
  std::string path;
  FILE* file = nullptr;
  bool committed = false;
  ~TempFile() {
    if (file) std::fclose(file);
    if (!committed) std::remove(path.c_str());
  }
};

void write_bytes(TempFile& tmp, const void* p, size_t n, const std::string& path) {
  if (n == 0) return;
  STOKE_CHECK(std::fwrite(p, 1, n, tmp.file) == n, kSaveOp, path, ": writing ", tmp.path,
              " failed: ", errno_text());
}

// Makes the rename durable. Filesystems that cannot fsync a directory (EINVAL) are accepted.
void fsync_directory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  FdCloser d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  STOKE_CHECK(d.fd >= 0, kSaveOp, path, ": cannot open directory ", dir,
              " to fsync it: ", errno_text());
  STOKE_CHECK(::fsync(d.fd) == 0 || errno == EINVAL, kSaveOp, path, ": fsync of directory ", dir,
              " failed: ", errno_text());
}

// --- reading ----------------------------------------------------------------------------------

struct Entry {
  std::string name;
  const DTypeInfo* info = nullptr;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Thrown from the JSON parser callback to stop parsing a header that is well-formed JSON but not a
// safetensors header (too deeply nested, duplicate tensor names).
struct HeaderRejected {
  std::string why;
};

// A JSON value that is a non-negative integer (nlohmann parses those as unsigned).
bool is_count(const json& v) {
  return v.is_number_unsigned();
}

Entry parse_entry(const std::string& name, const json& v, uint64_t data_size,
                  const std::string& path) {
  const auto fail_prefix = [&] { return path + ": tensor '" + name + "': "; };
  STOKE_CHECK(v.is_object(), kLoadOp, fail_prefix(),
              "expected an object with dtype, shape and data_offsets, got ", v.type_name());
  Entry e;
  e.name = name;

  const auto dtype = v.find("dtype");
  STOKE_CHECK(dtype != v.end(), kLoadOp, fail_prefix(), "missing \"dtype\"");
  STOKE_CHECK(dtype->is_string(), kLoadOp, fail_prefix(), "\"dtype\" must be a string, got ",
              dtype->type_name());
  const std::string& dtype_name = dtype->get_ref<const std::string&>();
  e.info = info_of(dtype_name);
  STOKE_CHECK(e.info, kLoadOp, fail_prefix(), "unknown dtype \"", dtype_name,
              "\" (stoke reads F32, F64, F16, BF16, I32, I64, U8, BOOL)");

  const auto shape = v.find("shape");
  STOKE_CHECK(shape != v.end(), kLoadOp, fail_prefix(), "missing \"shape\"");
  STOKE_CHECK(shape->is_array(), kLoadOp, fail_prefix(), "\"shape\" must be an array, got ",
              shape->type_name());
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& dim : *shape) {
    STOKE_CHECK(is_count(dim), kLoadOp, fail_prefix(),
                "shape dims must be non-negative integers, got ", dim.dump());
    const uint64_t d = dim.get<uint64_t>();
    STOKE_CHECK(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), kLoadOp,
                fail_prefix(), "shape dim ", d, " is too large");
    e.shape.push_back(static_cast<int64_t>(d));
    overflow |= __builtin_mul_overflow(numel, d, &numel);
  }
  // A zero dim makes the tensor empty whatever the other dims multiplied to.
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) {
    numel = 0;
    overflow = false;
  }
  uint64_t nbytes = 0;
  overflow |=
      __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.info->dtype)), &nbytes);
  STOKE_CHECK(!overflow && numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
              kLoadOp, fail_prefix(), "shape ", shape->dump(), " has too many elements");

  const auto offsets = v.find("data_offsets");
  STOKE_CHECK(offsets != v.end(), kLoadOp, fail_prefix(), "missing \"data_offsets\"");
  STOKE_CHECK(offsets->is_array() && offsets->size() == 2 && is_count((*offsets)[0]) &&
                  is_count((*offsets)[1]),
              kLoadOp, fail_prefix(),
              "\"data_offsets\" must be two non-negative integers [begin, end], got ",
              offsets->dump());
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  STOKE_CHECK(e.begin <= e.end, kLoadOp, fail_prefix(), "data_offsets [", e.begin, ", ", e.end,
              "] has begin > end");
  STOKE_CHECK(e.end <= data_size, kLoadOp, fail_prefix(), "data_offsets [", e.begin, ", ", e.end,
              "] end beyond the data section (", data_size, " bytes)");
  STOKE_CHECK(e.end - e.begin == nbytes, kLoadOp, fail_prefix(), "data_offsets [", e.begin, ", ",
              e.end, "] span ", e.end - e.begin, " bytes, but shape ", e.shape, " of ",
              e.info->name, " needs ", nbytes);
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& v, const std::string& path) {
  STOKE_CHECK(v.is_object(), kLoadOp, path, ": \"__metadata__\" must be an object, got ",
              v.type_name());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    STOKE_CHECK(value.is_string(), kLoadOp, path, ": metadata value of '", key,
                "' must be a string, got ", value.type_name());
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

json parse_header(const std::string& text, const std::string& path) {
  std::unordered_set<std::string> names;
  // Valid headers nest three levels (header object, entry object, shape/offsets array): refusing
  // deeper nesting early bounds the parser's work on hostile input.
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth > 2)
      throw HeaderRejected{"header JSON is nested deeper than a safetensors header can be"};
    if (event == json::parse_event_t::key && depth == 1 &&
        !names.insert(parsed.get<std::string>()).second)
      throw HeaderRejected{"duplicate key \"" + parsed.get<std::string>() + "\" in the header"};
    return true;
  };
  try {
    return json::parse(text, check);
  } catch (const json::exception& e) {
    STOKE_FAIL(kLoadOp, path, ": header is not valid JSON: ", e.what());
  } catch (const HeaderRejected& r) {
    STOKE_FAIL(kLoadOp, path, ": ", r.why);
  }
}

// Checks "stoke.crc32" when the file has it (files from other writers have none) and removes it
// from the metadata handed back, so that a loaded file saves again unchanged.
void verify_checksums(SafetensorsFile& file, const std::string& path, bool required) {
  const auto found = file.metadata.find(kChecksumKey);
  if (found == file.metadata.end()) {
    STOKE_CHECK(!required, kLoadOp, path, ": no \"", kChecksumKey,
                "\" in the metadata: every file stoke writes has one, so this file was edited (a "
                "renamed or removed key) or was not written by stoke");
    return;
  }
  json sums;
  try {
    sums = json::parse(found->second);
  } catch (const json::exception&) {
    STOKE_FAIL(kLoadOp, path, ": metadata \"", kChecksumKey,
               "\" is not a JSON object: the file is corrupt");
  }
  STOKE_CHECK(sums.is_object(), kLoadOp, path, ": metadata \"", kChecksumKey,
              "\" is not a JSON object: the file is corrupt");
  const auto stored = [&](const std::string& name) -> std::string {
    const auto it = sums.find(name);
    STOKE_CHECK(it != sums.end() && it->is_string(), kLoadOp, path, ": no checksum for '", name,
                "' in \"", kChecksumKey, "\": the file is corrupt or was edited");
    return it->get<std::string>();
  };
  for (const auto& [name, t] : file.tensors) {
    const std::string want = stored(name);
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    const std::string got =
        tensor_crc(name, info_of(t.dtype()).name, t.shape(), t.data_ptr(), nbytes);
    STOKE_CHECK(got == want, kLoadOp, path, ": tensor '", name, "' fails its checksum (stored ",
                want, ", the file's data gives ", got, "): the file is corrupt");
  }
  const std::string want = stored(kMetadataKey);
  const std::string got = metadata_crc(file.metadata);
  STOKE_CHECK(got == want, kLoadOp, path, ": metadata fails its checksum (stored ", want,
              ", the file's metadata gives ", got, "): the file is corrupt or was edited");
  STOKE_CHECK(sums.size() == file.tensors.size() + 1, kLoadOp, path, ": \"", kChecksumKey,
              "\" names ", sums.size() - 1, " tensors but the file holds ", file.tensors.size(),
              ": the file is corrupt or was edited");
  file.metadata.erase(found);
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<WriteItem> items;
  items.reserve(tensors.size());
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    STOKE_CHECK(t.defined(), kSaveOp, path, ": tensor '", name, "' is undefined");
    STOKE_CHECK(t.device().is_cpu(), kSaveOp, path, ": tensor '", name, "' is on ", t.device(),
                ", expected cpu (copy it with .to(Device::cpu()) first)");
    STOKE_CHECK(name != kMetadataKey, kSaveOp, path, ": a tensor cannot be named \"", name,
                "\" (reserved for metadata)");
    STOKE_CHECK(seen.insert(name).second, kSaveOp, path, ": duplicate tensor name '", name, "'");
    Tensor data = t.detach().contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(data.numel()) * data.element_size();
    items.push_back({&name, std::move(data), &info_of(t.dtype()), nbytes});
  }
  // The reference order: descending dtype alignment, then name (bytewise).
  std::sort(items.begin(), items.end(), [](const WriteItem& a, const WriteItem& b) {
    if (a.info->rank != b.info->rank) return a.info->rank > b.info->rank;
    return *a.name < *b.name;
  });
  STOKE_CHECK(!metadata.count(kChecksumKey), kSaveOp, path, ": metadata key \"", kChecksumKey,
              "\" is reserved for the checksums stoke writes");
  json checksums = json::object();
  for (const WriteItem& it : items)
    checksums[*it.name] =
        tensor_crc(*it.name, it.info->name, it.data.shape(), it.data.data_ptr(), it.nbytes);
  checksums[kMetadataKey] = metadata_crc(metadata);
  std::map<std::string, std::string> stored = metadata;
  stored[kChecksumKey] = checksums.dump(-1, ' ', false, json::error_handler_t::replace);
  const std::string header = make_header(items, stored, path);

  TempFile tmp{.path = path + ".tmp." + std::to_string(::getpid())};
  // Opened without blocking: a FIFO left at the temporary name is refused, not waited on.
  const int fd = open_output_file(tmp.path, O_TRUNC, kSaveOp, path + ": temporary file");
  tmp.file = ::fdopen(fd, "wb");
  if (!tmp.file) ::close(fd);
  STOKE_CHECK(tmp.file, kSaveOp, path, ": cannot create ", tmp.path, ": ", errno_text());
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  write_bytes(tmp, length, sizeof length, path);
  write_bytes(tmp, header.data(), header.size(), path);
  for (const WriteItem& it : items)
    write_bytes(tmp, it.data.data_ptr(), static_cast<size_t>(it.nbytes), path);
  STOKE_CHECK(std::fflush(tmp.file) == 0, kSaveOp, path, ": flushing ", tmp.path,
              " failed: ", errno_text());
  STOKE_CHECK(::fsync(::fileno(tmp.file)) == 0, kSaveOp, path, ": fsync of ", tmp.path,
              " failed: ", errno_text());
  const int closed = std::fclose(tmp.file);
  tmp.file = nullptr;
  STOKE_CHECK(closed == 0, kSaveOp, path, ": closing ", tmp.path, " failed: ", errno_text());
  STOKE_CHECK(std::rename(tmp.path.c_str(), path.c_str()) == 0, kSaveOp, path, ": renaming ",
              tmp.path, " over it failed: ", errno_text());
  tmp.committed = true;
  fsync_directory(path);
}

SafetensorsFile load_safetensors(const std::string& path, const SafetensorsLoadOptions& options) {
  // O_NONBLOCK: opening a FIFO would block until a writer came; the regular-file check follows.
  FdCloser fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  STOKE_CHECK(fd.fd >= 0, kLoadOp, path, ": cannot open: ", errno_text());
  struct stat st {};
  STOKE_CHECK(::fstat(fd.fd, &st) == 0, kLoadOp, path, ": cannot stat: ", errno_text());
  STOKE_CHECK(S_ISREG(st.st_mode), kLoadOp, path, ": not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  STOKE_CHECK(file_size >= 8, kLoadOp, path, ": file is ", file_size,
              " bytes, shorter than the 8-byte header length");

  unsigned char length[8];
  read_exact(fd.fd, length, 8, 0, path);
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= static_cast<uint64_t>(length[i]) << (8 * i);
  STOKE_CHECK(header_size <= kMaxHeaderBytes, kLoadOp, path, ": header length ", header_size,
              " exceeds the 100 MB limit");
  STOKE_CHECK(header_size <= file_size - 8, kLoadOp, path, ": header length ", header_size,
              " is larger than the file (", file_size, " bytes)");
  std::string text(static_cast<size_t>(header_size), '\0');
  read_exact(fd.fd, text.data(), header_size, 8, path);

  const json header = parse_header(text, path);
  STOKE_CHECK(header.is_object(), kLoadOp, path, ": header is not a JSON object (got ",
              header.type_name(), ")");
  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = file_size - data_start;

  SafetensorsFile out;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey)
      out.metadata = parse_metadata(value, path);
    else
      entries.push_back(parse_entry(key, value, data_size, path));
  }

  // The data section must be covered exactly, as the reference library requires
  // (safetensors/src/tensor.rs, Metadata::validate and read_metadata): sorted by their offsets,
  // each tensor begins where the one before it ended (the first at 0), and the last ends at the end
  // of the file. A gap, an overlap or trailing bytes mean the header does not describe the data:
  // a byte inserted into the header shifts the data by one and leaves bytes uncovered, which the
  // checksum alone did not catch when the insertion fell into the checksum's own key.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered)
      STOKE_FAIL(kLoadOp, path, ": tensors '", previous->name, "' and '", e.name,
                 "' overlap (data_offsets [", previous->begin, ", ", previous->end, "] and [",
                 e.begin, ", ", e.end, "])");
    STOKE_CHECK(e.begin == covered, kLoadOp, path, ": ", e.begin - covered,
                " bytes of the data section before tensor '", e.name, "' (data_offsets [", e.begin,
                ", ", e.end, "]) belong to no tensor: ",
                previous ? "'" + previous->name + "' ends at " + std::to_string(covered)
                         : std::string("the first tensor must begin at 0"));
    covered = e.end;
    previous = &e;
  }
  STOKE_CHECK(covered == data_size, kLoadOp, path, ": ", data_size - covered,
              " trailing bytes after the last tensor's data (the tensors cover ", covered,
              " of the data section's ", data_size,
              " bytes): the header does not describe the "
              "file");

  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, {.dtype = e.info->dtype});
    const uint64_t nbytes = e.end - e.begin;
    if (nbytes > 0) {
      read_exact(fd.fd, t.data_ptr(), nbytes, data_start + e.begin, path);
      // A bool must hold 0 or 1 (anything else is undefined behaviour in C++).
      if (e.info->dtype == DType::boolean) {
        auto* p = static_cast<unsigned char*>(t.data_ptr());
        for (uint64_t i = 0; i < nbytes; ++i) p[i] = p[i] != 0;
      }
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  verify_checksums(out, path, options.require_checksum);
  return out;
}

}  // namespace stoke::nn
