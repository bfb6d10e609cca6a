// stoke-train's files on disk: the checkpoint directory (checked before anything is loaded, an
// earlier run's results never replaced without --overwrite, stale temp files of dead processes
// removed) and the JSONL metrics log (one flushed write per record, every failure an error).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flags.h"

namespace stoke::train {

// What a new run (neither --resume nor --overwrite) would replace: --checkpoint's last and best
// checkpoints and a non-empty metrics file (f.metrics, already defaulted to DIR/metrics.jsonl).
// Returns the message to refuse with (exit 2), naming the directory and the files, or nothing.
std::optional<std::string> earlier_results(const Flags& f);

// Creates --checkpoint's directory if missing and proves that a file can be created and removed in
// it; throws naming the directory and the reason otherwise. With --overwrite, removes the earlier
// run's last and best checkpoints. Then removes stale temp files (see below).
void prepare_checkpoint_dir(const Flags& f);

// Removes `dir`'s "*.safetensors.tmp.PID" files (left by a save that was killed) whose process is
// gone (kill(PID, 0) fails with ESRCH); a live process's file is never touched. Reports each on
// stderr; returns the paths removed.
std::vector<std::string> remove_stale_temp_files(const std::string& dir);

// The JSONL metrics file. Each record is one write(2) of a whole line to an O_APPEND descriptor,
// so a kill loses nothing written before it; a failed open, write or close throws naming the file
// and the OS error.
class MetricsLog {
 public:
  MetricsLog() = default;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  ~MetricsLog();

  // Opens `path` for appending (`append`, a resumed run) or creates/truncates it.
  void open(std::string path, bool append);
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  // A resumed run continues after `epochs_done` whole epochs and `global_step` steps: records the
  // interrupted run wrote past that point (step and eval records with a larger step, epoch
  // records of later epochs, a last line cut short) are written again by the resumed run, so
  // they are cut off here. Returns how many lines were dropped.
  int64_t drop_records_after(int64_t epochs_done, int64_t global_step);

  // Appends one record (a JSON object without the newline).
  void write(const std::string& record);
  // Closes the file, reporting a failed close.
  void close();

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace stoke::train
