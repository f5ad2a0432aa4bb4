#include "protondose/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "protondose/core/error.h"

namespace protondose {

std::string temporary_path_for(const std::string& final_path) {
  static std::atomic<unsigned> counter{0};
  return final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

namespace {

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw IoError("cannot reopen '" + path + "' to flush it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw IoError("cannot flush '" + path + "' to disk: " + std::strerror(err));
}

}  // namespace

void write_file_atomically(const std::string& final_path,
                           const std::function<void(const std::string&)>& write) {
  const std::string tmp = temporary_path_for(final_path);
  try {
    write(tmp);
    fsync_path(tmp);
    if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
      throw IoError("cannot rename '" + tmp + "' to '" + final_path + "': " + std::strerror(errno));
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

void write_text_atomically(const std::string& final_path, const std::string& contents) {
  write_file_atomically(final_path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError("cannot open '" + tmp + "' for writing: " + std::strerror(errno));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) throw IoError("writing '" + final_path + "' failed (disk full?): " + std::strerror(errno));
  });
}

}  // namespace protondose
