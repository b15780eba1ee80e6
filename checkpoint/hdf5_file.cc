#include "checkpoint/hdf5_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/fd.h"

// The format stores H5T_IEEE_F32LE; the writer passes native floats and the reader copies the
// file's bytes straight into floats, both of which assume a little-endian host.
static_assert(std::endian::native == std::endian::little, "hdp checkpoints assume a little-endian host");

#ifndef H5_HAVE_THREADSAFE
#error "hdp_checkpoint needs the thread-safe build of libhdf5 (see checkpoint/hdf5_file.h)"
#endif

namespace hdp::checkpoint {
namespace {

// HDF5 prints its error stack to stderr by default; we throw instead, with our own message. The
// thread-safe build keeps that setting per thread, so each thread turns it off once.
void silence_hdf5_errors() {
  thread_local bool silenced = false;
  if (!silenced) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    silenced = true;
  }
}

// Object headers go into 1 MiB metadata blocks instead of 2 KiB ones, so that they sit together
// rather than between the tensors' raw data: a restore from a cold page cache then opens a
// file's datasets without one disk seek per dataset.
constexpr hsize_t kMetaBlockBytes = hsize_t{1} << 20;

Hid file_access_list() {
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_file_locking(fapl.get(), false, true);
  H5Pset_meta_block_size(fapl.get(), kMetaBlockBytes);
  return fapl;
}

}  // namespace

Hid& Hid::operator=(Hid&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

hid_t Hid::release() {
  const hid_t id = id_;
  id_ = H5I_INVALID_HID;
  return id;
}

void Hid::reset() {
  if (id_ >= 0 && closer_) closer_(id_);
  id_ = H5I_INVALID_HID;
}

Hdf5File Hdf5File::create(const std::filesystem::path& path) {
  silence_hdf5_errors();
  Hid fapl = file_access_list();
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (id < 0) throw FatalError("HDF5: cannot create " + path.string());
  return Hdf5File(path, Hid(id, H5Fclose));
}

Hdf5File Hdf5File::open_read(const std::filesystem::path& path) {
  silence_hdf5_errors();
  Hid fapl = file_access_list();
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (id < 0) throw FatalError("HDF5: cannot open " + path.string() + " (missing, truncated or not an HDF5 file)");
  return Hdf5File(path, Hid(id, H5Fclose));
}

void Hdf5File::fail(const std::string& what) const { throw FatalError("HDF5: " + path_.string() + ": " + what); }

void Hdf5File::write_dataset(const std::string& name, hid_t type, std::int64_t length, const void* data) {
  const hsize_t dims[1] = {static_cast<hsize_t>(length)};
  Hid space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  // Contiguous layout, no fill: the write is the only pass over these bytes.
  if (H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS) < 0 || H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER) < 0) {
    fail("cannot set the dataset creation properties of " + name);
  }
  Hid dataset(H5Dcreate2(file_.get(), name.c_str(), type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), H5Dclose);
  if (dataset.get() < 0) fail("cannot create dataset " + name);
  if (length == 0) return;
  if (H5Dwrite(dataset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) fail("cannot write dataset " + name);
  const haddr_t address = H5Dget_offset(dataset.get());
  const hsize_t bytes = H5Dget_storage_size(dataset.get());
  // Closed first: HDF5 keeps a dataset of up to its sieve buffer's size (64 KiB) in that buffer
  // until the dataset is closed, and writes it to the file then.
  dataset.reset();
  if (address != HADDR_UNDEF) start_writeback(address, address + bytes);
}

void Hdf5File::start_writeback(std::uint64_t begin, std::uint64_t end) {
  // The dataset's bytes are in the page cache at its address. They are handed to the disk,
  // without waiting, once kWritebackBytes have gathered: one request per dataset would
  // cost a small checkpoint one I/O (and, in a virtual machine, one exit to the host) per
  // dataset. Only a hint (an I/O error shows again at the fsync); durability comes from
  // close_durably, which also takes what is still gathered.
  if (unsent_end_ == 0) {
    unsent_begin_ = begin, unsent_end_ = end;
  } else {
    unsent_begin_ = std::min(unsent_begin_, begin), unsent_end_ = std::max(unsent_end_, end);
  }
  if (unsent_end_ - unsent_begin_ < kWritebackBytes) return;
  ::sync_file_range(descriptor(), static_cast<off_t>(unsent_begin_), static_cast<off_t>(unsent_end_ - unsent_begin_),
                    SYNC_FILE_RANGE_WRITE);
  unsent_begin_ = unsent_end_ = 0;
}

int Hdf5File::descriptor() const {
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file_.get(), H5P_DEFAULT, &handle) < 0 || handle == nullptr) fail("H5Fget_vfd_handle failed");
  return *static_cast<int*>(handle);
}

void Hdf5File::reserve(std::uint64_t raw_bytes, std::size_t datasets) {
  // Metadata takes whole meta blocks, about 700 bytes per dataset with its attribute (measured
  // with libhdf5 1.10.8); 1 KiB each leaves room.
  const std::uint64_t bytes = raw_bytes + kMetaBlockBytes * (1 + datasets * 1024 / kMetaBlockBytes);
  if (::fallocate(descriptor(), 0, 0, static_cast<off_t>(bytes)) == 0 || errno == EOPNOTSUPP) return;
  fail("cannot reserve " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
}

void Hdf5File::write_floats(const std::string& name, std::span<const float> data) {
  write_dataset(name, H5T_NATIVE_FLOAT, static_cast<std::int64_t>(data.size()), data.data());
}

void Hdf5File::write_bytes(const std::string& name, std::span<const std::uint8_t> data) {
  write_dataset(name, H5T_NATIVE_UINT8, static_cast<std::int64_t>(data.size()), data.data());
}

void Hdf5File::set_attribute(const std::string& object, const std::string& attribute, std::int64_t value) {
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid attr(H5Acreate_by_name(file_.get(), object.c_str(), attribute.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT,
                             H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  if (attr.get() < 0 || H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) < 0) {
    fail("cannot write attribute " + attribute + " of " + object);
  }
}

Hid Hdf5File::open_dataset(const std::string& name) const {
  if (H5Lexists(file_.get(), name.c_str(), H5P_DEFAULT) <= 0) fail("no dataset " + name);
  Hid dataset(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (dataset.get() < 0) fail("cannot open dataset " + name);
  return dataset;
}

std::int64_t Hdf5File::length(const std::string& name) const { return length_of(open_dataset(name), name); }

std::int64_t Hdf5File::length_of(const Hid& dataset, const std::string& name) const {
  Hid space(H5Dget_space(dataset.get()), H5Sclose);
  hsize_t dims[1] = {0};
  if (space.get() < 0 || H5Sget_simple_extent_ndims(space.get()) != 1 ||
      H5Sget_simple_extent_dims(space.get(), dims, nullptr) != 1) {
    fail("dataset " + name + " is not one-dimensional");
  }
  return static_cast<std::int64_t>(dims[0]);
}

void Hdf5File::read_floats(const std::string& name, std::int64_t offset, std::span<float> out) const {
  if (out.empty()) return;
  const std::string elements = "elements [" + std::to_string(offset) + ", " + std::to_string(offset + std::ssize(out)) + ")";
  // HDF5 (under its global lock) only says where the dataset's bytes are; the read itself is a
  // plain pread outside that lock, so that ranks restoring as threads of one process copy from
  // the page cache in parallel rather than one at a time. The format makes this exact: 1-D,
  // contiguous, no filters, float32 little-endian.
  std::uint64_t address = 0;
  const int fd = descriptor();
  {
    Hid dataset = open_dataset(name);
    Hid type(H5Dget_type(dataset.get()), H5Tclose);
    if (type.get() < 0 || H5Tequal(type.get(), H5T_IEEE_F32LE) <= 0) fail("dataset " + name + " is not float32 little-endian");
    if (offset < 0 || offset + std::ssize(out) > length_of(dataset, name)) fail("dataset " + name + " has no " + elements);
    address = H5Dget_offset(dataset.get());
    if (address == HADDR_UNDEF) fail("dataset " + name + " has no contiguous raw data");
  }
  auto* bytes = reinterpret_cast<char*>(out.data());
  std::size_t left = out.size_bytes();
  off_t at = static_cast<off_t>(address + static_cast<std::uint64_t>(offset) * sizeof(float));
  while (left > 0) {
    const ssize_t n = ::pread(fd, bytes, left, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read " + elements + " of " + name + ": " + std::strerror(errno));
    if (n == 0) fail("the file ends inside " + elements + " of " + name + " (truncated)");
    bytes += n, at += n, left -= static_cast<std::size_t>(n);
  }
}

std::vector<std::uint8_t> Hdf5File::read_bytes(const std::string& name) const {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(length(name)));
  Hid dataset = open_dataset(name);
  if (!out.empty() && H5Dread(dataset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) {
    fail("cannot read dataset " + name);
  }
  return out;
}

std::uint64_t Hdf5File::raw_data_offset(const std::string& name) const {
  Hid dataset = open_dataset(name);
  const haddr_t address = H5Dget_offset(dataset.get());
  if (address == HADDR_UNDEF) fail("dataset " + name + " has no contiguous raw data");
  return address;
}

void Hdf5File::close_durably() {
  if (H5Fflush(file_.get(), H5F_SCOPE_LOCAL) < 0) fail("H5Fflush failed");
  // One fsync, after the close, through a duplicate of HDF5's descriptor: it makes durable every
  // page of the file (the superblock H5Fclose rewrites and the trim to the file's real size
  // included), and it shares the open file on which the kernel recorded any write error since
  // the file was created (a descriptor opened after the close could miss one).
  const Fd kept(::fcntl(descriptor(), F_DUPFD_CLOEXEC, 0));
  if (kept.get() < 0) fail(std::string("cannot duplicate the file's descriptor: ") + std::strerror(errno));
  // Released first so that a failed close is not retried by ~Hid.
  if (H5Fclose(file_.release()) < 0) fail("H5Fclose failed");
  if (::fsync(kept.get()) != 0) fail(std::string("fsync failed: ") + std::strerror(errno));
}

}  // namespace hdp::checkpoint
