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

// The files a run writes: --metrics (or DIR/metrics.jsonl), --profile, DIR/last.safetensors and
// DIR/best.safetensors. Throws naming the flag and the path when one of them is a FIFO, a
// directory or another special file (a FIFO blocked open() without a word), or when two of them
// are the same file (--metrics DIR/last.safetensors: each save replaced the records).
void check_run_outputs(const Flags& f);

// Where f.metrics came from, for errors: "--metrics", or "--checkpoint DIR: its metrics file".
std::string metrics_origin(const Flags& f);

// With --profile FILE: creates (or empties) FILE now, so that a path that cannot be written is
// named before training rather than when the trace is written at the end of the window.
void prepare_profile_output(const Flags& f);

// With --resume: the message to refuse with (exit 2) when there is no state to resume from but
// the directory holds results that a new run would replace (best.safetensors, a non-empty metrics
// file), or when DIR/last.safetensors is a dangling symbolic link; nothing when last.safetensors
// exists (the run resumes from it) or the directory holds no earlier results (a fresh start, as a
// restart script that always passes --resume expects).
std::optional<std::string> resume_refusal(const Flags& f);

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

  // Opens `path` for appending (`append`, a resumed run) or creates/truncates it; `what` names
  // where the path came from in errors ("--metrics"). A FIFO or directory is refused at once.
  void open(std::string path, bool append, const std::string& what);
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  // A resumed run continues after `epochs_done` whole epochs and `global_step` steps: records the
  // interrupted run wrote past that point (step and eval records with a larger step, epoch
  // records of later epochs, a last line cut short) are written again by the resumed run, so
  // they are cut off here. Every complete line must be a record stoke-train writes (a JSON
  // object with a string "type", integer "step" and "epoch" where present): anything else is an
  // error naming the file and the line. Returns how many lines were dropped.
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
