// Fitting uint8 HWC images to a fixed size for packing: bilinear resize and center crop.
// The resize is plain bilinear with half-pixel centers (OpenCV's INTER_LINEAR, PyTorch's
// interpolate(mode="bilinear", align_corners=False) without antialiasing), rounded to nearest;
// it does not low-pass first, so strong downscaling aliases as those do.
#pragma once

#include <cstdint>
#include <vector>

namespace stoke::data {

// How an image of another size becomes height x width.
enum class Fit {
  exact,        // no resizing: every image must already be height x width
  stretch,      // bilinear resize to height x width (the aspect ratio may change)
  resize_crop,  // bilinear resize keeping the aspect ratio so that the image covers
                // height x width (torchvision's Resize(min side)), then the center crop of it
  crop,         // center crop only; every image must be at least height x width
};

// Writes `src` (h x w x c) fitted to out_h x out_w x c into dst (resized). Throws stoke::Error when
// the image cannot be fitted (Fit::exact with another size, Fit::crop with a smaller image).
void fit_image(const uint8_t* src, int64_t h, int64_t w, int64_t c, int64_t out_h, int64_t out_w,
               Fit fit, std::vector<uint8_t>& dst);

// Bilinear resize of src (h x w x c) to a virtual rh x rw image, of which the window starting at
// (top, left) of size out_h x out_w is written to dst (out_h * out_w * c bytes). With rh == h and
// rw == w it copies the window exactly.
void resize_window(const uint8_t* src, int64_t h, int64_t w, int64_t c, int64_t rh, int64_t rw,
                   int64_t top, int64_t left, int64_t out_h, int64_t out_w, uint8_t* dst);

}  // namespace stoke::data
