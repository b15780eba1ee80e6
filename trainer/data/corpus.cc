#include "trainer/data/corpus.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>

#include "common/error.h"
#include "common/fd.h"
#include "common/log.h"
#include "common/text.h"
#include "trainer/data/corpus_index_cache.h"

namespace hdp::trainer::data {
namespace {

namespace fs = std::filesystem;

// Entries named in a warning each; the rest are only counted (summary line at the end).
constexpr std::uint64_t kNamedSkips = 5;

// The walk of Corpus's constructor: each directory's entries sorted by key (a directory's key is
// "name/"), so the documents come out in bytewise order of their relative paths. Every call is
// relative to the directory's descriptor (openat, fstatat, faccessat), and an entry's type comes
// from the listing (d_type) where the filesystem gives it: a regular file costs one fstatat for
// its size and one faccessat, without resolving its path from the root each time (a restarted
// worker indexes the corpus before it can train).
class Walk {
 public:
  Walk(const fs::path& root, const CorpusOptions& options, CorpusStats& stats, std::vector<std::string>& paths,
       std::vector<std::int64_t>& sizes)
      : root_(root), options_(options), stats_(stats), paths_(paths), sizes_(sizes) {}

  // The root, followed if it is a link (it is the user's choice of directory).
  void root() {
    const int fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw InvalidArgument("cannot list data root " + quote_value(root_.string()) + ": " + errno_text(errno));
    directory(fd, "");
  }

  std::uint64_t unnamed_skips() const { return named_ < stats_.unreadable ? stats_.unreadable - named_ : 0; }

 private:
  struct Child {
    std::string key;  // sort key: the name, "name/" for a directory
    std::string name;
    fs::file_type type;
  };

  static fs::file_type type_of(mode_t mode) {
    if (S_ISDIR(mode)) return fs::file_type::directory;
    if (S_ISREG(mode)) return fs::file_type::regular;
    if (S_ISLNK(mode)) return fs::file_type::symlink;
    return fs::file_type::unknown;  // FIFO, socket, device: skipped as special
  }

  static fs::file_type type_of(unsigned char d_type) {
    switch (d_type) {
      case DT_DIR: return fs::file_type::directory;
      case DT_REG: return fs::file_type::regular;
      case DT_LNK: return fs::file_type::symlink;
      case DT_UNKNOWN: return fs::file_type::none;  // ask fstatat
      default: return fs::file_type::unknown;
    }
  }

  // Takes `fd` (an open directory) and closes it. `prefix`: the directory's path relative to the
  // root with a trailing '/', "" for the root.
  void directory(int fd, const std::string& prefix) {
    DIR* listing = ::fdopendir(fd);
    if (!listing) {
      const int error = errno;
      ::close(fd);
      if (prefix.empty()) {
        throw InvalidArgument("cannot list data root " + quote_value(root_.string()) + ": " + errno_text(error));
      }
      unreadable(prefix, "cannot list directory: " + errno_text(error));
      return;
    }
    std::unique_ptr<DIR, int (*)(DIR*)> closing(listing, ::closedir);
    const int dir = ::dirfd(listing);
    std::vector<Child> children;
    for (;;) {
      errno = 0;
      const dirent* entry = ::readdir(listing);
      if (!entry) {
        if (errno != 0) unreadable(prefix, "listing stopped: " + errno_text(errno));
        break;
      }
      std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      fs::file_type type = type_of(entry->d_type);
      if (type == fs::file_type::none) {
        struct stat st {};
        if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
          unreadable(prefix + name, errno_text(errno));
          continue;
        }
        type = type_of(st.st_mode);
      }
      const bool is_dir = type == fs::file_type::directory;
      children.push_back({is_dir ? name + "/" : name, std::move(name), type});
    }
    std::sort(children.begin(), children.end(), [](const Child& a, const Child& b) { return a.key < b.key; });
    for (const Child& child : children) {
      if (stop_) return;
      const std::string relative = prefix + child.name;
      switch (child.type) {
        case fs::file_type::directory: {
          const int sub = ::openat(dir, child.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (sub < 0) {
            unreadable(prefix + child.key, "cannot list directory: " + errno_text(errno));
          } else {
            directory(sub, prefix + child.key);
          }
          break;
        }
        case fs::file_type::symlink:
          ++stats_.symlinks;
          log()->debug("data: not following symbolic link {}", quote_value(relative));
          break;
        case fs::file_type::regular:
          file(dir, child.name, relative);
          break;
        default:
          ++stats_.special_files;
          log()->debug("data: skipping {}: not a regular file", quote_value(relative));
          break;
      }
    }
  }

  void file(int dir, const std::string& name, const std::string& relative) {
    struct stat st {};
    if (::fstatat(dir, name.c_str(), &st, 0) != 0) {
      unreadable(relative, errno_text(errno));
      return;
    }
    if (st.st_size == 0) {
      ++stats_.empty_files;
      return;
    }
    // Permission only; read() handles whatever else stops the bytes later.
    if (::faccessat(dir, name.c_str(), R_OK, AT_EACCESS) != 0) {
      unreadable(relative, errno_text(errno));
      return;
    }
    const auto bytes = static_cast<std::int64_t>(st.st_size);
    if (stats_.documents >= options_.max_documents || bytes > options_.max_bytes - stats_.bytes) {
      stats_.truncated = true;
      stop_ = true;
      log()->warn("data: stopped indexing {} before {}: limit of {} documents / {} bytes reached",
                  quote_value(root_.string()), quote_value(relative), options_.max_documents, options_.max_bytes);
      return;
    }
    paths_.push_back(relative);
    sizes_.push_back(bytes);
    ++stats_.documents;
    stats_.bytes += bytes;
  }

  void unreadable(const std::string& relative, const std::string& why) {
    ++stats_.unreadable;
    if (named_ < kNamedSkips) {
      ++named_;
      log()->warn("data: skipping {} under {}: {}", quote_value(relative.empty() ? "." : relative),
                  quote_value(root_.string()), why);
    }
  }

  const fs::path& root_;
  const CorpusOptions& options_;
  CorpusStats& stats_;
  std::vector<std::string>& paths_;
  std::vector<std::int64_t>& sizes_;
  std::uint64_t named_ = 0;
  bool stop_ = false;
};

std::string skipped_summary(const CorpusStats& s) {
  std::string text;
  auto add = [&](std::uint64_t count, std::string_view what) {
    if (count == 0) return;
    text += text.empty() ? "" : ", ";
    text += std::to_string(count) + " " + std::string(what);
  };
  add(s.empty_files, "empty files");
  add(s.symlinks, "symbolic links (not followed)");
  add(s.special_files, "special files");
  add(s.unreadable, "unreadable entries");
  return text.empty() ? "nothing skipped" : "skipped " + text;
}

// Opens `relative` (a document's path) beneath `root` for reading, following no symbolic link on
// the way (openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): a link put in a document's place, or
// in a directory's, after indexing is not followed either, so nothing outside the tree is read.
// O_NONBLOCK: nor does a FIFO put there block the open. A kernel without openat2 (before 5.6)
// opens the path with O_NOFOLLOW, which guards its last component only. -1 with errno set.
int open_beneath(const fs::path& root, const std::string& relative) {
  const Fd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) return -1;
  open_how how{};
  how.flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
  const long fd = ::syscall(SYS_openat2, dir.get(), relative.c_str(), &how, sizeof how);
  if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
  return ::openat(dir.get(), relative.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}

// Reads exactly `size` bytes at `offset`; false (errno set, or 0 at end of file) when it cannot.
bool read_at(int fd, char* out, std::int64_t size, std::int64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, out, static_cast<std::size_t>(size), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = 0;
      return false;
    }
    out += n;
    size -= n;
    offset += n;
  }
  return true;
}

}  // namespace

Corpus::Corpus(std::filesystem::path root, const CorpusOptions& options) : root_(std::move(root)) {
  if (options.context < 1) {
    throw InvalidArgument("context length must be >= 1, got " + std::to_string(options.context));
  }
  if (options.max_documents < 1) throw InvalidArgument("max_documents must be >= 1, got 0");
  if (options.max_bytes < 1) {
    throw InvalidArgument("max_bytes must be >= 1, got " + std::to_string(options.max_bytes));
  }
  context_ = options.context;
  const std::string shown = quote_value(root_.string());  // as the caller named it
  std::error_code ec;
  const fs::file_status status = fs::status(root_, ec);  // follows a link: the root may be one
  if (status.type() == fs::file_type::not_found) throw InvalidArgument("data root " + shown + " does not exist");
  if (ec) throw InvalidArgument("cannot examine data root " + shown + ": " + ec.message());
  if (status.type() != fs::file_type::directory) throw InvalidArgument("data root " + shown + " is not a directory");
  // Reads open root_ / path: absolute, so that a later change of working directory cannot move them.
  root_ = fs::absolute(root_, ec);
  if (ec) throw InvalidArgument("cannot resolve data root " + shown + ": " + ec.message());

  const auto start = std::chrono::steady_clock::now();
  CorpusStats& stats = index_.stats;
  fs::path kept;  // the index's file in options.index_cache_dir; empty: none
  std::uint64_t unnamed_skips = 0;
  if (!options.index_cache_dir.empty()) {
    kept = corpus_index_file(options.index_cache_dir, root_, options);
    std::string why;
    if (std::optional<CorpusIndex> read = read_corpus_index(kept, root_, options, why)) {
      index_ = std::move(*read);
      stats.from_cache = true;
    } else if (why != "absent") {
      log()->warn("data: not using the index of {} kept in {}: {}; indexing the tree", shown,
                  quote_value(kept.string()), why);
    }
  }
  if (!stats.from_cache) {
    Walk walk(root_, options, stats, index_.paths, index_.sizes);
    walk.root();
    unnamed_skips = walk.unnamed_skips();
  }
  first_piece_.reserve(index_.sizes.size());
  for (std::int64_t size : index_.sizes) {
    first_piece_.push_back(stats.pieces);
    stats.pieces += static_cast<std::uint64_t>((size + context_ - 1) / context_);
  }
  std::string listing = "corpus " + std::to_string(context_) + "\n";
  for (std::size_t d = 0; d < index_.paths.size(); ++d) {
    listing += index_.paths[d] + '\0' + std::to_string(index_.sizes[d]) + '\n';
  }
  fingerprint_ = fingerprint_of(listing);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::string skipped = skipped_summary(stats);
  if (unnamed_skips > 0) skipped += " (" + std::to_string(unnamed_skips) + " unreadable not named above)";
  if (stats.documents == 0) {
    throw InvalidArgument("data root " + shown + " holds no usable document (a non-empty regular file): " + skipped);
  }
  if (!kept.empty() && !stats.from_cache) {
    try {
      if (!write_corpus_index(kept, root_, options, index_)) {
        log()->info("data: the index of {} is too large to keep for the node's other workers", shown);
      }
    } catch (const Error& e) {
      log()->warn("data: the index of {} is not kept for the node's other workers: {}", shown, e.what());
    }
  }
  const auto level = stats.unreadable > 0 || stats.truncated ? spdlog::level::warn : spdlog::level::info;
  // No document cut (hdp tokenize walks with no limit): no piece count to tell.
  const std::string pieces = stats.pieces == stats.documents
                                 ? std::string("one piece each")
                                 : std::to_string(stats.pieces) + " pieces of <= " + std::to_string(context_) + " tokens";
  log()->log(level, "data: {} {} documents ({} bytes, {}) under {} in {:.3f} s; {}",
             stats.from_cache ? "read the node's index of" : "indexed", stats.documents, stats.bytes, pieces, shown,
             stats.seconds, skipped);
}

PieceLocation Corpus::locate(std::uint64_t piece) const {
  HDP_CHECK(piece < index_.stats.pieces,
            "piece " + std::to_string(piece) + " of " + std::to_string(index_.stats.pieces));
  const auto after = std::upper_bound(first_piece_.begin(), first_piece_.end(), piece);
  const auto document = static_cast<std::uint64_t>(after - first_piece_.begin()) - 1;
  const auto offset = static_cast<std::int64_t>(piece - first_piece_[document]) * context_;
  return {document, offset, std::min(context_, index_.sizes[document] - offset)};
}

bool Corpus::read(std::uint64_t piece, std::int64_t length, std::vector<std::int32_t>& tokens,
                  std::string& why) const {
  const PieceLocation at = locate(piece);
  HDP_CHECK(length >= 1 && length <= at.length,
            "length " + std::to_string(length) + " of a piece of " + std::to_string(at.length));
  const std::int64_t size = index_.sizes[at.document];
  auto refuse = [&](const std::string& reason) {
    why = "piece " + std::to_string(piece) + " (bytes " + std::to_string(at.offset) + ".." +
          std::to_string(at.offset + at.length) + " of " + quote_value(index_.paths[at.document]) + " under " +
          quote_value(root_.string()) + "): " + reason;
    return false;
  };
  const Fd fd(open_beneath(root_, index_.paths[at.document]));
  if (fd.get() < 0) return refuse("cannot open: " + errno_text(errno));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return refuse("cannot examine: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) return refuse("no longer a regular file");
  if (st.st_size != size) {
    return refuse("size changed since indexing (" + std::to_string(size) + " -> " + std::to_string(st.st_size) +
                  " bytes)");
  }
  auto read_failed = [&] {
    return refuse(errno == 0 ? std::string("shorter than its size") : "cannot read: " + errno_text(errno));
  };

  std::string bytes(static_cast<std::size_t>(length), '\0');
  if (!read_at(fd.get(), bytes.data(), length, at.offset)) return read_failed();
  const std::int64_t probe = std::min(size, kBinaryProbeBytes);
  std::string_view head;
  std::string head_bytes;
  if (at.offset == 0 && length >= probe) {
    head = std::string_view(bytes).substr(0, static_cast<std::size_t>(probe));
  } else {
    head_bytes.resize(static_cast<std::size_t>(probe));
    if (!read_at(fd.get(), head_bytes.data(), probe, 0)) return read_failed();
    head = head_bytes;
  }
  if (const auto nul = head.find('\0'); nul != std::string_view::npos) {
    return refuse("binary (NUL byte at offset " + std::to_string(nul) + ")");
  }
  tokens.resize(bytes.size());
  std::transform(bytes.begin(), bytes.end(), tokens.begin(),
                 [](char c) { return static_cast<std::int32_t>(static_cast<unsigned char>(c)); });
  return true;
}

}  // namespace hdp::trainer::data
