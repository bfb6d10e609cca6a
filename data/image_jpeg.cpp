// JPEG through libjpeg-turbo's libjpeg API (maintained, fuzzed by OSS-Fuzz). libjpeg reports
// errors through a callback that must not return; it longjmps back to decode_jpeg_c, a function
// whose frames between setjmp and longjmp are libjpeg's C code and hold no C++ object, so nothing
// with a destructor is jumped over. The C++ caller turns the collected message into an Error.
// jpeglib.h needs size_t and FILE declared before it.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <csetjmp>
#include <cstring>

#include "core/error.h"
#include "data/image_codecs.h"

namespace stoke::data::detail {
namespace {

// A progressive JPEG may hold any number of scans, each re-reading the whole coefficient
// buffer: a few KB of input can cost minutes. libjpeg-turbo's own TurboJPEG API limits scans to
// 500 when asked to; so does this decoder.
constexpr int kMaxScans = 500;

struct JpegState {
  jpeg_error_mgr err;
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  const DecodeOptions* options;  // the size limits, checked after the header
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* s = reinterpret_cast<JpegState*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, s->message);
  std::longjmp(s->jump, 1);
}

// Warnings (level -1) are corrupt data libjpeg decodes past. Those that mean missing data (a
// truncated file, a cut entropy segment: libjpeg fills the rest with grey) are errors here, so a
// damaged image is never trained on silently; others (e.g. stray bytes before a marker, common in
// camera files that decode fine) are tolerated as every mainstream reader does.
void on_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER) on_error(cinfo);
}

void on_progress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxScans) {
    auto* s = reinterpret_cast<JpegState*>(cinfo->err);
    std::snprintf(s->message, sizeof s->message, "more than %d scans (progressive JPEG)",
                  kMaxScans);
    std::longjmp(s->jump, 1);
  }
}

// CMYK as Adobe writes it (inverted: 255 = no ink) to RGB, as stb_image and PIL do.
uint8_t ink(uint8_t v, uint8_t k) {
  const unsigned t = unsigned(v) * unsigned(k) + 128u;
  return static_cast<uint8_t>((t + (t >> 8)) >> 8);
}

// The C side: returns 0 on success, 1 on a libjpeg error (s->message), 2 over the size limits.
// `out` is resized between the header and the scanlines; it lives in the caller's frame.
int decode_jpeg_c(const uint8_t* data, size_t size, JpegState* s, Example* out) {
  jpeg_decompress_struct cinfo;
  std::memset(&cinfo, 0, sizeof cinfo);
  cinfo.err = jpeg_std_error(&s->err);
  s->err.error_exit = on_error;
  s->err.emit_message = on_message;
  s->progress.progress_monitor = on_progress;
  if (setjmp(s->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &s->progress;
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  // A size check that may throw must not run here (a throw would skip jpeg_destroy): compare
  // and return, and the caller reports it.
  const DecodeOptions& o = *s->options;
  if ((o.max_width > 0 && cinfo.image_width > o.max_width) ||
      (o.max_height > 0 && cinfo.image_height > o.max_height)) {
    out->width = cinfo.image_width;
    out->height = cinfo.image_height;
    jpeg_destroy_decompress(&cinfo);
    return 2;
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space =
      cmyk ? JCS_CMYK : (cinfo.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB);
  jpeg_start_decompress(&cinfo);
  const size_t w = cinfo.output_width, h = cinfo.output_height;
  const size_t comps = static_cast<size_t>(cinfo.output_components);
  const size_t c = cmyk ? 3 : comps;
  // CMYK rows decode into a scratch row from libjpeg's own pool (freed by jpeg_destroy, so a
  // longjmp leaks nothing), then convert to RGB.
  JSAMPARRAY scratch =
      cmyk ? (*cinfo.mem->alloc_sarray)(reinterpret_cast<j_common_ptr>(&cinfo), JPOOL_IMAGE,
                                        static_cast<JDIMENSION>(w * 4), 1)
           : nullptr;
  out->pixels.resize(w * h * c);
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t* dst = out->pixels.data() + size_t(cinfo.output_scanline) * w * c;
    JSAMPROW rows[1] = {cmyk ? scratch[0] : dst};
    jpeg_read_scanlines(&cinfo, rows, 1);
    if (cmyk) {
      const uint8_t* src = scratch[0];
      for (size_t x = 0; x < w; ++x) {
        const uint8_t k = src[4 * x + 3];
        dst[3 * x] = ink(src[4 * x], k);
        dst[3 * x + 1] = ink(src[4 * x + 1], k);
        dst[3 * x + 2] = ink(src[4 * x + 2], k);
      }
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  out->width = static_cast<int64_t>(w);
  out->height = static_cast<int64_t>(h);
  out->channels = static_cast<int64_t>(c);
  return 0;
}

}  // namespace

void decode_jpeg(const uint8_t* data, size_t size, const std::string& path,
                 const DecodeOptions& options, Example& out) {
  JpegState state;
  std::memset(&state, 0, sizeof state);
  state.options = &options;
  const int rc = decode_jpeg_c(data, size, &state, &out);
  if (rc == 2) check_image_size(out.width, out.height, path, options);  // throws
  if (rc != 0)
    STOKE_FAIL("decode_image", "'", path, "': cannot decode JPEG (", size,
               " bytes): ", state.message);
}

}  // namespace stoke::data::detail
