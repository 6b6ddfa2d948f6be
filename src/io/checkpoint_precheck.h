// The pre-check of a checkpoint file (io/checkpoint.cpp): libhdf5 1.10 can
// crash, loop or allocate gigabytes on a corrupt file (the reproducers in
// fuzz/library-crashes/checkpoint), and a process cannot recover from that.
// So every file is first opened and its structure read (everything but the
// tensor values) in a short-lived child process, under limits: 5 s of CPU
// time, 1 GiB of address space beyond the parent's, 120 s of wall-clock time,
// no core dump. Only when the child finds the file sound does the process
// itself open it; a child that crashes, loops or runs out of memory becomes a
// one-line error naming the file, and an error the child met (a strata
// error) is reported as the child phrased it.
//
// A file that passed is remembered for the life of the process (by device,
// inode, size and modification time), so opening it again costs nothing.
// STRATA_CHECKPOINT_CHECK=0 turns the pre-check off (a file system where
// fork() is unwanted, and the fuzzers of fuzz/ which look for library bugs).
// Where fork() fails, the file is opened without it, with a warning.
#pragma once

#include <functional>
#include <string>

namespace strata {

// Runs `walk` (which opens `path` and reads its structure, throwing
// strata::Error on a problem) in a child process; returns when it finished
// cleanly and throws a one-line strata::Error otherwise.
void precheck_checkpoint(const std::string& path, const std::function<void()>& walk);

}  // namespace strata
