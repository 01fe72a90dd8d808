// Writing a file whole or not at all (docs/safetensors.md, "Saving").
#pragma once

#include <string>

namespace kiln::io {

// A file written whole or not at all. A regular file or a missing path is
// written as a new file in the same directory that replaces it on commit()
// (fsync, rename): readers see the old file or the whole new one. The new file
// has no name until commit() where the file system allows (O_TMPFILE), so a
// process killed mid-save leaves nothing behind; elsewhere it is a short
// hidden name (".kiln-<pid>-<n>.tmp"), removed if the save fails. A symbolic
// link is followed: the file it leads to is replaced and the link stays. A
// character device or a FIFO (/dev/null, /dev/stdout on a pipe) is written
// directly, in place; a directory, a block device or a socket is refused.
// Errors are IOErrors naming op, the path and the system's reason.
class AtomicFileWriter {
 public:
  AtomicFileWriter(std::string path, std::string op);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  void commit();

 private:
  void open();
  void release() noexcept;
  [[noreturn]] void fail(const std::string& what) const;
  void open_in_place(unsigned mode);
  void open_new_file(unsigned keep_mode);
  std::string next_temp_name() const;
  void sync_directory() const noexcept;

  std::string path_;    // as the caller gave it; errors name it
  std::string op_;      // names the operation in errors
  std::string target_;  // the file replaced: path_, or where its links lead
  std::string dir_;     // target_'s directory
  std::string temp_;    // a named new file not yet renamed; empty otherwise
  int fd_ = -1;
  bool in_place_ = false;  // a device or FIFO, written directly
  bool unnamed_ = false;   // an O_TMPFILE file, linked on commit()
};

}  // namespace kiln::io
