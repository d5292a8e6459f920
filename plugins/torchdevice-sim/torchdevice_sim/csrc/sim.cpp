// sim: a simulated GPU registered with torch as its PrivateUse1 device (renamed "sim" from Python).
//
// What lives here is what a vendor's runtime provides and Python cannot: the device allocator
// (one per device, with a capacity, CUDA's statistics and torch.OutOfMemoryError), the device
// guard (per-thread current device and stream), asynchronous streams (one worker thread per
// stream running queued kernels in order), events, per-device generators, the pinned host
// allocator, autocast registrations, and the handful of kernels the dispatcher needs in C++
// (empty, views, resize_), and PrivateUse1's fallback: the common ops run here without Python (the
// fast path, below launch), every other op reaches the Python fallback (_kernels.py), which computes
// output metadata on the meta device and launches the CPU kernel onto a stream here.
//
// Device memory is host memory obtained with malloc, but torch sees it as sim memory: CPU
// kernels refuse it, .numpy() refuses it, and only the worker threads touch its bytes.

#include <torch/extension.h>
#include <torch/library.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/enum_tag.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace sim {

constexpr c10::DeviceType kSim = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 16;
constexpr int kPoolStreams = 16;  // streams per device handed out round-robin, as CUDA's pool
constexpr size_t kBlockRound = 512;  // CUDA's minimum block size: sizes are rounded up to it

using Clock = std::chrono::steady_clock;

int g_device_count = 0;
int64_t g_clock_khz = 1410000;

// -- GIL-aware waiting ----------------------------------------------------------------------------

// Waits must not hold the GIL: a worker may need it (never for kernels, but for freeing Python
// objects) and the host thread holding it while blocked would stall every other Python thread.
template <typename F>
void wait_without_gil(F&& wait) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    wait();
  } else {
    wait();
  }
}

thread_local bool tl_is_worker = false;

// -- streams ---------------------------------------------------------------------------------------

struct Stream {
  int device;
  int64_t id;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<std::function<void()>, std::function<void()>>> queue;  // (task, after completion)
  uint64_t enqueued = 0;  // tasks pushed
  std::atomic<uint64_t> completed{0};  // tasks finished
  Clock::time_point finished{};  // when the last task finished (written by the worker only)
  std::string error;  // first asynchronous failure, reported at the next call on this stream
  bool started = false;
  bool inline_active = false;  // a task runs on the host thread that launched it (try_inline): the worker waits
  std::vector<uint64_t> clock;  // race checking's vector clock (g_race_mu): what this stream's next kernel is ordered after

  Stream(int d, int64_t i) : device(d), id(i) {}

  void ensure_worker() {
    if (started) return;
    started = true;
    std::thread([this] {
      tl_is_worker = true;
      for (;;) {
        std::function<void()> task, after;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [this] { return !queue.empty() && !inline_active; });
          task = std::move(queue.front().first);
          after = std::move(queue.front().second);
          queue.pop_front();
        }
        try {
          if (task) task();
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          if (error.empty()) error = e.what();
        }
        task = nullptr;
        {
          // One step for both: whoever sees the stream past this task sees its event done, and
          // the other way round (an event's mutex is only ever taken inside this one).
          std::lock_guard<std::mutex> lock(mu);
          finished = Clock::now();
          completed.fetch_add(1);
          if (after) after();
        }
        cv.notify_all();
      }
    }).detach();  // never joined: a stream lives as long as the process, as a GPU queue does
  }

  void raise_pending_error() {
    std::string message;
    {
      std::lock_guard<std::mutex> lock(mu);
      std::swap(message, error);
    }
    TORCH_CHECK(message.empty(), "sim: a kernel queued earlier on stream ", id, " of sim:", device,
                " failed (errors from asynchronous work are reported at the next call, as on a GPU): ", message);
  }

  uint64_t push(std::function<void()> task, std::function<void()> after = nullptr) {
    raise_pending_error();
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(mu);
      ensure_worker();
      queue.emplace_back(std::move(task), std::move(after));
      ticket = ++enqueued;
    }
    cv.notify_all();
    return ticket;
  }

  // The fast path (issue 32): a stream with nothing queued or running runs a task on the calling
  // thread, as its worker would run it next (a ticket, the finished time, a failure kept for the next
  // call, then `after`), without the hand-off to the worker (two context switches, most of a launch).
  // Work queued meanwhile by another thread waits for it (inline_active), so order is kept. False
  // when the stream is busy: the caller queues the task. A task that could block never comes here.
  template <typename Task>
  uint64_t try_inline(Task&& task, const std::function<void()>& after = nullptr) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!queue.empty() || inline_active || completed.load() < enqueued || !error.empty()) return 0;
      inline_active = true;
      ticket = ++enqueued;
    }
    std::string failure;
    try {
      task();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure.empty() && error.empty()) error = failure;
      finished = Clock::now();
      completed.fetch_add(1);
      inline_active = false;
      if (after) after();
    }
    cv.notify_all();
    return ticket;
  }

  uint64_t ticket() {
    std::lock_guard<std::mutex> lock(mu);
    return enqueued;
  }

  bool query() {
    std::lock_guard<std::mutex> lock(mu);
    return completed.load() >= enqueued;
  }

  void wait_for(uint64_t ticket) {
    TORCH_CHECK(!tl_is_worker, "sim: a stream's worker cannot wait on a stream");
    wait_without_gil([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return completed.load() >= ticket; });
    });
  }

  void synchronize() {
    wait_for(ticket());
    raise_pending_error();
  }
};

struct DeviceStreams {
  std::mutex mu;
  std::vector<Stream*> streams;  // index = stream id; 0 is the default stream; never freed
  int next_pool = 0;
};

DeviceStreams* g_streams[kMaxDevices];

void check_device(int device) {
  TORCH_CHECK(device >= 0 && device < g_device_count, "Invalid device ordinal sim:", device, ": sim has ",
              g_device_count, " device(s) (TORCHDEVICE_SIM_DEVICES and the visible devices)");
}

Stream* get_stream(int device, int64_t id) {
  check_device(device);
  auto* ds = g_streams[device];
  std::lock_guard<std::mutex> lock(ds->mu);
  TORCH_CHECK(id >= 0 && id <= kPoolStreams, "sim: no stream ", id, " on sim:", device);
  while (static_cast<int64_t>(ds->streams.size()) <= id) {
    ds->streams.push_back(new Stream(device, static_cast<int64_t>(ds->streams.size())));
  }
  return ds->streams[id];
}

int64_t new_stream_id(int device) {
  check_device(device);
  auto* ds = g_streams[device];
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(ds->mu);
    id = 1 + (ds->next_pool++ % kPoolStreams);
  }
  get_stream(device, id);
  return id;
}

std::vector<std::pair<Stream*, uint64_t>> device_tickets(int device) {
  std::vector<std::pair<Stream*, uint64_t>> out;
  auto* ds = g_streams[device];
  std::vector<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(ds->mu);
    streams = ds->streams;
  }
  for (auto* s : streams) out.emplace_back(s, s->ticket());
  return out;
}

void synchronize_device(int device) {
  check_device(device);
  for (auto& [stream, ticket] : device_tickets(device)) stream->wait_for(ticket);
  for (auto& [stream, ticket] : device_tickets(device)) stream->raise_pending_error();
}

// per-thread current device and, per device, current stream id
thread_local int tl_device = 0;
thread_local int64_t tl_stream[kMaxDevices] = {0};

// -- race checking: happens-before between streams (opt-in, TORCHDEVICE_SIM_RACECHECK) --------------
//
// Each stream has a vector clock, one entry per stream of every device (slot = device * 17 + id):
// entry S of stream S counts the kernels launched on S, the others what S has been ordered after.
// Recording an event captures the recording stream's clock, waiting on it merges it in; the host
// learns the clocks of what it synchronizes (a stream, an event, a device), and every kernel launched
// afterwards, on any stream, starts from what the host knows. An access by a kernel on stream S at
// tick e is ordered before a later kernel on T iff T's clock holds at least e in S's slot. Device
// memory blocks keep their last write and the reads since (race_access). Off, none of this runs: the
// hooks below test one atomic flag.

using VectorClock = std::vector<uint64_t>;

std::atomic<bool> g_race{false};
std::mutex g_race_mu;  // every clock and every block's history
VectorClock g_host_clock;  // what the host has learned by synchronizing

int race_slot(const Stream* s) { return s->device * (kPoolStreams + 1) + static_cast<int>(s->id); }

void join_clock(VectorClock& into, const VectorClock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

// The host has synchronized with `clock` (taken before it waited): later launches are ordered after it.
void race_learn(const VectorClock& clock) {
  std::lock_guard<std::mutex> lock(g_race_mu);
  join_clock(g_host_clock, clock);
}

VectorClock race_clock_of(Stream* s) {
  if (!g_race.load(std::memory_order_relaxed)) return {};
  std::lock_guard<std::mutex> lock(g_race_mu);
  return s->clock;
}

VectorClock device_clock(int device) {  // every stream's of the device, joined
  auto* ds = g_streams[device];
  std::vector<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(ds->mu);
    streams = ds->streams;
  }
  VectorClock out;
  std::lock_guard<std::mutex> lock(g_race_mu);
  for (auto* s : streams) join_clock(out, s->clock);
  return out;
}

VectorClock race_clock_of_device(int device) {
  if (!g_race.load(std::memory_order_relaxed)) return {};
  return device_clock(device);
}

// -- events ----------------------------------------------------------------------------------------

struct Event {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t scheduled = 0;  // records requested
  uint64_t done = 0;  // records reached by their stream
  Clock::time_point when;
  int device = -1;
  bool timing = false;
  VectorClock clock;  // race checking (g_race_mu): the recording stream's clock at the latest record
};

using EventHandle = std::shared_ptr<Event>;

EventHandle& event_of(void** slot) {
  if (*slot == nullptr) *slot = new EventHandle(std::make_shared<Event>());
  return *static_cast<EventHandle*>(*slot);
}

void record_event(const EventHandle& ev, Stream* stream, bool timing) {
  uint64_t version;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    version = ++ev->scheduled;
    ev->device = stream->device;
    ev->timing = timing;
  }
  if (g_race.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(g_race_mu);
    ev->clock = stream->clock;
  }
  // The stream reaches the event when it has finished the work queued before it, and not before the host
  // queued it: on an idle stream that is the moment of the record, as on a GPU (the worker's own wake-up
  // latency is no device time), on a busy one the end of the work ahead.
  Clock::time_point queued = Clock::now();
  auto reach = [ev, stream, queued] {
    std::lock_guard<std::mutex> lock(ev->mu);
    ev->when = std::max(queued, stream->finished);
  };
  std::function<void()> done = [ev, version] {
    {
      std::lock_guard<std::mutex> lock(ev->mu);
      if (ev->done < version) ev->done = version;
    }
    ev->cv.notify_all();
  };
  stream->raise_pending_error();
  if (stream->try_inline(reach, done) == 0) stream->push(reach, done);
}

void block_on_event(const EventHandle& ev, Stream* stream) {
  uint64_t version;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    version = ev->scheduled;
  }
  if (version == 0) return;  // never recorded: nothing to wait for, as CUDA
  if (g_race.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(g_race_mu);
    join_clock(stream->clock, ev->clock);
  }
  bool reached;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    reached = ev->done >= version;
  }
  if (reached) {  // the stream has nothing to wait for (an event recorded on an idle stream is reached at once)
    stream->raise_pending_error();
    return;
  }
  stream->push([ev, version] {
    std::unique_lock<std::mutex> lock(ev->mu);
    ev->cv.wait(lock, [&] { return ev->done >= version; });
  });
}

bool query_event(const EventHandle& ev) {
  std::lock_guard<std::mutex> lock(ev->mu);
  return ev->done >= ev->scheduled;
}

void synchronize_event(const EventHandle& ev) {
  uint64_t version;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    version = ev->scheduled;
  }
  VectorClock learned;
  if (g_race.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(g_race_mu);
    learned = ev->clock;
  }
  wait_without_gil([&] {
    std::unique_lock<std::mutex> lock(ev->mu);
    ev->cv.wait(lock, [&] { return ev->done >= version; });
  });
  if (!learned.empty()) race_learn(learned);
}

// The host waits for a stream, or a device, as the program asked (not sim's own waits): it learns their clocks.
void synchronize_stream_learning(Stream* s) {
  VectorClock learned = race_clock_of(s);
  s->synchronize();
  if (!learned.empty()) race_learn(learned);
}

void synchronize_device_learning(int device) {
  check_device(device);
  VectorClock learned = race_clock_of_device(device);
  synchronize_device(device);
  if (!learned.empty()) race_learn(learned);
}

double elapsed_ms(const EventHandle& a, const EventHandle& b) {
  // ValueErrors, as torch's own events check these (c10/core/impl/InlineEvent.h)
  TORCH_CHECK_VALUE(a->timing && b->timing, "Both events must be created with argument 'enable_timing=True'.");
  TORCH_CHECK_VALUE(a->scheduled > 0 && b->scheduled > 0,
                    "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK(query_event(a) && query_event(b),
              "Both events must be completed before calculating elapsed time.");
  std::lock_guard<std::mutex> la(a->mu);
  std::lock_guard<std::mutex> lb(b->mu);
  return std::chrono::duration<double, std::milli>(b->when - a->when).count();
}

// -- device memory ---------------------------------------------------------------------------------

struct Access {
  int slot = -1;  // the stream's race slot; -1: none
  uint64_t tick = 0;  // the stream's own clock entry for the kernel
  std::string op;
};

struct History {  // race checking: a block's last write and the reads since, one (the latest) per stream
  Access write;
  std::vector<Access> reads;
};

struct Block {
  void* ptr;
  size_t size;  // rounded
  size_t requested;
  int device;
  std::unique_ptr<History> history{};  // while race checking; a block handed out again starts without
};

struct Pending {
  Block* block;
  std::vector<std::pair<Stream*, uint64_t>> waits;
};

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;

void stat_add(Stat& s, int64_t amount) {
  s.current += amount;
  if (amount > 0) s.allocated += amount; else s.freed += -amount;
  if (s.current > s.peak) s.peak = s.current;
}

struct DeviceMemory {
  std::mutex mu;
  size_t capacity = 0;
  double fraction = 1.0;
  c10::CachingDeviceAllocator::DeviceStats stats;
  std::multimap<size_t, Block*> cache;  // free blocks, reusable at once
  std::vector<Pending> pending;  // freed blocks that queued work may still use

  size_t limit() const { return static_cast<size_t>(static_cast<double>(capacity) * fraction); }
  int64_t reserved() const { return stats.reserved_bytes[0].current; }
  int64_t allocated() const { return stats.allocated_bytes[0].current; }

  void sweep() {  // pending blocks whose streams have passed the free go to the cache
    auto keep = pending.begin();
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      bool ready = true;
      for (auto& [stream, ticket] : it->waits) ready = ready && stream->completed.load() >= ticket;
      if (ready) {
        cache.emplace(it->block->size, it->block);
      } else {
        if (keep != it) *keep = std::move(*it);  // never self-move: it would empty the waits
        ++keep;
      }
    }
    pending.erase(keep, pending.end());
  }

  void release_cache() {
    for (auto& [size, block] : cache) {
      std::free(block->ptr);
      stat_add(stats.reserved_bytes[0], -static_cast<int64_t>(size));
      stat_add(stats.segment[0], -1);
      stats.num_device_free += 1;
      delete block;
    }
    cache.clear();
  }
};

DeviceMemory* g_memory[kMaxDevices];

std::string format_size(uint64_t size) {
  char buf[64];
  if (size <= 1024) {
    snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(size));
  } else if (size <= 1048576) {
    snprintf(buf, sizeof buf, "%.2f KiB", size / 1024.0);
  } else if (size <= 1073741824ULL) {
    snprintf(buf, sizeof buf, "%.2f MiB", size / 1048576.0);
  } else {
    snprintf(buf, sizeof buf, "%.2f GiB", size / 1073741824.0);
  }
  return buf;
}

void free_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  auto* mem = g_memory[block->device];
  auto waits = device_tickets(block->device);  // conservative: every queue of the device passes the free
  std::lock_guard<std::mutex> lock(mem->mu);
  stat_add(mem->stats.allocated_bytes[0], -static_cast<int64_t>(block->size));
  stat_add(mem->stats.requested_bytes[0], -static_cast<int64_t>(block->requested));
  stat_add(mem->stats.allocation[0], -1);
  stat_add(mem->stats.active[0], -1);
  stat_add(mem->stats.active_bytes[0], -static_cast<int64_t>(block->size));
  mem->pending.push_back({block, std::move(waits)});
}

struct SimAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    int device = tl_device;
    check_device(device);
    c10::Device where(kSim, static_cast<c10::DeviceIndex>(device));
    if (nbytes == 0) return {nullptr, nullptr, &noop_delete, where};
    auto* mem = g_memory[device];
    size_t size = (nbytes + kBlockRound - 1) / kBlockRound * kBlockRound;
    Block* block = nullptr;
    for (int attempt = 0; block == nullptr; ++attempt) {
      std::unique_lock<std::mutex> lock(mem->mu);
      mem->sweep();
      auto hit = mem->cache.find(size);
      if (hit != mem->cache.end()) {
        block = hit->second;
        mem->cache.erase(hit);
        break;
      }
      if (static_cast<size_t>(mem->reserved()) + size > mem->limit() && !mem->cache.empty()) {
        mem->stats.num_alloc_retries += 1;  // as CUDA: free the cache and try again
        mem->release_cache();
      }
      if (static_cast<size_t>(mem->reserved()) + size <= mem->limit()) {
        void* ptr = std::malloc(size);
        TORCH_CHECK(ptr != nullptr, "sim: the host could not provide ", format_size(size), " for sim:", device);
        block = new Block{ptr, size, nbytes, device};
        stat_add(mem->stats.reserved_bytes[0], static_cast<int64_t>(size));
        stat_add(mem->stats.segment[0], 1);
        mem->stats.num_device_alloc += 1;
        break;
      }
      if (attempt == 0 && !mem->pending.empty() && !tl_is_worker) {
        lock.unlock();  // freed blocks wait for queued work: let it finish, then look again
        synchronize_device(device);
        continue;
      }
      mem->stats.num_ooms += 1;
      size_t limit = mem->limit();
      size_t reserved = static_cast<size_t>(mem->reserved());
      size_t allocated = static_cast<size_t>(mem->allocated());
      size_t free_bytes = limit > reserved ? limit - reserved : 0;
      lock.unlock();
      TORCH_CHECK_WITH(OutOfMemoryError, false, "sim out of memory. Tried to allocate ", format_size(size),
                       ". Device sim:", device, " has a total capacity of ", format_size(mem->capacity), " of which ",
                       format_size(free_bytes), " is free", (mem->fraction < 1.0 ? " within this process's memory fraction" : ""),
                       ". Of the allocated memory ", format_size(allocated), " is allocated by PyTorch, and ",
                       format_size(reserved - allocated), " is reserved by PyTorch but unallocated. "
                       "(TORCHDEVICE_SIM_MEMORY sets the capacity.)");
    }
    block->history.reset();  // fresh memory, fresh history (no live tensor reaches a cached block)
    {
      std::lock_guard<std::mutex> lock(mem->mu);
      block->requested = nbytes;
      stat_add(mem->stats.allocated_bytes[0], static_cast<int64_t>(block->size));
      stat_add(mem->stats.requested_bytes[0], static_cast<int64_t>(nbytes));
      stat_add(mem->stats.allocation[0], 1);
      stat_add(mem->stats.active[0], 1);
      stat_add(mem->stats.active_bytes[0], static_cast<int64_t>(block->size));
    }
    return {block->ptr, block, &free_block, where};
  }

  static void noop_delete(void*) {}

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool initialized() override { return g_device_count > 0; }

  void emptyCache(c10::MempoolId_t) override {
    for (int d = 0; d < g_device_count; ++d) {
      std::lock_guard<std::mutex> lock(g_memory[d]->mu);
      g_memory[d]->sweep();
      g_memory[d]->release_cache();
    }
  }

  void recordStream(const c10::DataPtr&, c10::Stream) override {
    // Frees wait for every queue of the device (free_block), so a block used on another stream is
    // never reused early: record_stream has nothing left to add.
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device(device);
    std::lock_guard<std::mutex> lock(g_memory[device]->mu);
    return g_memory[device]->stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device(device);
    auto* mem = g_memory[device];
    std::lock_guard<std::mutex> lock(mem->mu);
    for (auto* arr : {&mem->stats.allocation, &mem->stats.segment, &mem->stats.active, &mem->stats.allocated_bytes,
                      &mem->stats.reserved_bytes, &mem->stats.active_bytes, &mem->stats.requested_bytes}) {
      for (auto& s : *arr) s.reset_accumulated();
    }
    mem->stats.num_alloc_retries = 0;
    mem->stats.num_ooms = 0;
    mem->stats.num_device_alloc = 0;
    mem->stats.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device(device);
    auto* mem = g_memory[device];
    std::lock_guard<std::mutex> lock(mem->mu);
    for (auto* arr : {&mem->stats.allocation, &mem->stats.segment, &mem->stats.active, &mem->stats.allocated_bytes,
                      &mem->stats.reserved_bytes, &mem->stats.active_bytes, &mem->stats.requested_bytes}) {
      for (auto& s : *arr) s.reset_peak();
    }
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device(device);
    auto* mem = g_memory[device];
    std::lock_guard<std::mutex> lock(mem->mu);
    size_t reserved = static_cast<size_t>(mem->reserved());
    return {mem->capacity > reserved ? mem->capacity - reserved : 0, mem->capacity};
  }
};

SimAllocator g_allocator;
REGISTER_ALLOCATOR(kSim, &g_allocator);

// -- pinned host memory -----------------------------------------------------------------------------

std::mutex g_pinned_mu;
std::unordered_set<void*> g_pinned;

void free_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    g_pinned.erase(ptr);
  }
  std::free(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes ? std::malloc(nbytes) : nullptr;
    TORCH_CHECK(nbytes == 0 || ptr != nullptr, "sim: could not pin ", format_size(nbytes), " of host memory");
    if (ptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mu);
      g_pinned.insert(ptr);
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

PinnedAllocator g_pinned_allocator;

// The device's host allocator as torch.accelerator sees it (empty_host_cache and friends ask
// at::getHostAllocator for the current accelerator; with none registered that call crashed). Pinned
// blocks are malloc'd and freed at once, never cached, so there is nothing to empty; a queued copy keeps
// its source tensor alive itself, so no event has to guard a block's reuse.
struct SimHostAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override { return g_pinned_allocator.allocate(nbytes); }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    TORCH_CHECK(false, "sim keeps no host (pinned) memory statistics: its pinned blocks are plain allocations");
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

SimHostAllocator g_host_allocator;

bool is_pinned(const void* ptr) {
  std::lock_guard<std::mutex> lock(g_pinned_mu);
  return g_pinned.count(const_cast<void*>(ptr)) > 0;
}

// -- generators --------------------------------------------------------------------------------------

// CUDA's Philox generator state, owned by a sim device: a seed and a counter offset, whose state
// is CUDA's 16 bytes (seed as uint64, offset as int64, little-endian), so DTensor's RNG tracker and
// checkpoints read it as on a GPU. The draws themselves are the CPU kernels', from a CPU generator
// seeded from (seed, offset) by the fallback (_kernels.py), which then advances the offset as a
// CUDA kernel would (set_offset).
struct SimGenerator : c10::GeneratorImpl {
  explicit SimGenerator(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(kSim, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)), seed_(seed) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    set_current_seed(c10::detail::getNonDeterministicRandom(true));
    return seed_;
  }
  void set_offset(uint64_t offset) override {
    TORCH_CHECK(offset % 4 == 0, "offset must be a multiple of 4");
    offset_ = offset;
  }
  uint64_t get_offset() const override { return offset_; }

  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto state = at::detail::empty_cpu({kStateSize}, at::TensorOptions().dtype(at::kByte));
    auto* bytes = state.data_ptr<uint8_t>();
    int64_t offset = static_cast<int64_t>(offset_);
    std::memcpy(bytes, &seed_, sizeof(seed_));
    std::memcpy(bytes + sizeof(seed_), &offset, sizeof(offset));
    return state.getIntrusivePtr();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    at::detail::check_rng_state(new_state);
    TORCH_CHECK(new_state.numel() == kStateSize, "RNG state is wrong size: a sim generator's state is ", kStateSize,
                " bytes (seed, offset), as CUDA's; got ", new_state.numel());
    const auto* bytes = new_state.data_dtype_initialized<uint8_t>();
    int64_t offset = 0;
    std::memcpy(&seed_, bytes, sizeof(seed_));
    std::memcpy(&offset, bytes + sizeof(seed_), sizeof(offset));
    TORCH_CHECK(offset >= 0 && offset % 4 == 0, "offset must be a multiple of 4");
    offset_ = static_cast<uint64_t>(offset);
  }

 private:
  static constexpr int64_t kStateSize = 16;
  SimGenerator* clone_impl() const override {
    auto* copy = new SimGenerator(device_.index(), seed_);
    copy->offset_ = offset_;
    return copy;
  }
  uint64_t seed_;
  uint64_t offset_ = 0;
};

std::vector<at::Generator> g_generators;
std::once_flag g_generators_once;

const at::Generator& default_generator(c10::DeviceIndex index) {
  std::call_once(g_generators_once, [] {
    for (int d = 0; d < g_device_count; ++d) {
      g_generators.push_back(at::make_generator<SimGenerator>(static_cast<c10::DeviceIndex>(d)));
    }
  });
  int i = index < 0 ? tl_device : index;
  check_device(i);
  return g_generators[i];
}

// -- hooks and guard -----------------------------------------------------------------------------------

struct SimHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_device_count > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override { return default_generator(index); }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<SimGenerator>(index < 0 ? static_cast<c10::DeviceIndex>(tl_device) : index);
  }
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kSim, static_cast<c10::DeviceIndex>(tl_device)); }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return g_device_count > 0; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(g_device_count); }
  void setCurrentDevice(c10::DeviceIndex d) const override { check_device(d); tl_device = d; }
  c10::DeviceIndex getCurrentDevice() const override { return static_cast<c10::DeviceIndex>(tl_device); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = tl_device;
    if (d >= 0) { check_device(d); tl_device = d; }
    return static_cast<c10::DeviceIndex>(old);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

struct SimGuard final : c10::impl::DeviceGuardImplInterface {
  SimGuard() = default;
  explicit SimGuard(c10::DeviceType t) { TORCH_INTERNAL_ASSERT(t == kSim); }
  c10::DeviceType type() const override { return kSim; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = c10::Device(kSim, static_cast<c10::DeviceIndex>(tl_device));
    if (d.index() >= 0) { check_device(d.index()); tl_device = d.index(); }
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kSim, static_cast<c10::DeviceIndex>(tl_device)); }
  void setDevice(c10::Device d) const override { check_device(d.index()); tl_device = d.index(); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < g_device_count) tl_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const override {
    int i = d.index() < 0 ? tl_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kSim, static_cast<c10::DeviceIndex>(i)), tl_stream[i]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    int i = d.index() < 0 ? tl_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kSim, static_cast<c10::DeviceIndex>(i)), 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    int i = d.index() < 0 ? tl_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kSim, static_cast<c10::DeviceIndex>(i)), new_stream_id(i));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool = false) const override { return getNewStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    int i = s.device_index() < 0 ? tl_device : s.device_index();
    auto old = c10::Stream(c10::Stream::UNSAFE, c10::Device(kSim, static_cast<c10::DeviceIndex>(i)), tl_stream[i]);
    tl_stream[i] = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return static_cast<c10::DeviceIndex>(g_device_count); }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex, const c10::EventFlag flag) const override {
    record_event(event_of(event), get_stream(stream.device_index(), stream.id()),
                 flag == c10::EventFlag::BACKEND_DEFAULT);
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    block_on_event(*static_cast<EventHandle*>(event), get_stream(stream.device_index(), stream.id()));
  }
  bool queryEvent(void* event) const override {
    return event == nullptr || query_event(*static_cast<EventHandle*>(event));
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<EventHandle*>(event);
  }
  bool queryStream(const c10::Stream& stream) const override {
    auto* s = get_stream(stream.device_index(), stream.id());
    s->raise_pending_error();
    return s->query();
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    synchronize_stream_learning(get_stream(stream.device_index(), stream.id()));
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) synchronize_event(*static_cast<EventHandle*>(event));
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override { synchronize_device_learning(device_index); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "Both events must be recorded before calculating elapsed time.");
    return elapsed_ms(*static_cast<EventHandle*>(start), *static_cast<EventHandle*>(end));
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SimGuard);

Stream* current_stream_of(int device) { return get_stream(device, tl_stream[device]); }

// -- kernels the dispatcher needs in C++ -----------------------------------------------------------------

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  const auto where = c10::device_or_default(device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "sim: only strided tensors are supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
  const c10::DeviceGuard guard(where);
  return at::detail::empty_generic(size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const auto where = c10::device_or_default(device);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "sim: only strided tensors are supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
  const c10::DeviceGuard guard(where);
  return at::detail::empty_strided_generic(size, stride, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<int64_t> offset) {
  return at::cpu::as_strided(self, size, stride, offset);  // metadata only
}

at::Tensor& set_storage(at::Tensor& self, at::Storage storage, int64_t offset, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::cpu::set_(self, storage, offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage storage) {
  int64_t numel = static_cast<int64_t>(storage.nbytes() / self.dtype().itemsize());
  return at::cpu::set_(self, storage, 0, {numel}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::cpu::set_(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &g_allocator, true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

// Growing a storage: a new block, the old bytes copied once the current stream has passed them.
void resize_bytes(const c10::Storage& storage, size_t newsize) {
  auto* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  int device = impl->device().index();
  c10::DeviceGuard guard(impl->device());
  c10::DataPtr fresh = g_allocator.allocate(newsize);
  size_t keep = std::min(impl->nbytes(), newsize);
  if (keep > 0) {
    Stream* stream = current_stream_of(device);
    stream->synchronize();
    std::memcpy(fresh.get(), impl->data(), keep);
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(newsize);
}

void SimHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_bytes(storage, newsize);
}

const at::Tensor& resize(const at::Tensor& self, c10::SymIntArrayRef size, std::optional<c10::MemoryFormat> memory_format) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  auto* impl = self.unsafeGetTensorImpl();
  int64_t old_storage = self.storage().nbytes();
  impl->set_sizes_contiguous(sizes);
  const auto itemsize = self.dtype().itemsize();
  const auto offset = self.storage_offset();
  if (self.numel() > 0) {
    size_t needed = static_cast<size_t>((offset + self.numel()) * itemsize);
    if (needed > static_cast<size_t>(old_storage)) {
      resize_bytes(self.storage(), needed);
    }
  }
  if (memory_format.has_value() && *memory_format != c10::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("resize_", resize);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
}

// -- attention: the CPU's choice of kernel --------------------------------------------------------------

// scaled_dot_product_attention asks each device type which fused kernel to run. sim makes the
// choice the CPU would make for the same inputs; where that is the CPU's flash kernel it answers
// "overrideable", whose ops the Python fallback runs with that kernel (_kernels.attention).
int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  // The CPU's choice depends on shapes, strides, dtypes and whether grads are wanted, never on where the
  // memory is: ask it with uninitialised CPU tensors of the same metadata. Python dispatch is excluded so
  // that tracing modes (torch.compile's fake tensors) see no extra op; symbolic shapes get the math kernel.
  for (const auto* t : {&query, &key, &value}) {
    if (t->unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return static_cast<int64_t>(sdp::SDPBackend::math);
  }
  c10::impl::ExcludeDispatchKeyGuard no_python(c10::DispatchKeySet(
      {c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot, c10::DispatchKey::PreDispatch}));
  auto like = [](const at::Tensor& t) {
    auto cpu = at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU));
    return t.requires_grad() ? cpu.set_requires_grad(true) : cpu;
  };
  std::optional<at::Tensor> mask;
  if (attn_mask.has_value() && attn_mask->defined()) mask = like(*attn_mask);
  auto choice = static_cast<sdp::SDPBackend>(
      at::_fused_sdp_choice(like(query), like(key), like(value), mask, dropout_p, is_causal, scale, enable_gqa));
  if (choice == sdp::SDPBackend::flash_attention) choice = sdp::SDPBackend::overrideable;
  return static_cast<int64_t>(choice);
}

}  // namespace sim

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &sim::fused_sdp_choice);
}

namespace sim {

// -- autocast: CUDA's op lists and policies, for the sim device type ------------------------------------

#define SIM_LOW(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define SIM_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define SIM_FP32_OPT(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define SIM_DIFFERENT(REDISPATCH, NAME, SIG, RSIG, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(REDISPATCH, NAME, SIG, RSIG, POLICY)
#define SIM_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

}  // namespace sim

namespace at {  // the op lists name at:: types unqualified
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(SIM_LOW)
  AT_FORALL_FP32(SIM_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(SIM_FP32_OPT)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(SIM_DIFFERENT)
  AT_FORALL_PROMOTE(SIM_PROMOTE)
}
}  // namespace at

namespace sim {

// -- launching kernels onto streams --------------------------------------------------------------------

// A CPU tensor over the same bytes as sim tensor t: what a kernel on the device reads and writes.
// Made directly over t's storage bytes (from_blob's checks and size computation cost more than the rest of a launch).
at::Tensor host_view(const at::Tensor& t) {
  TORCH_CHECK(t.device().type() == kSim, "host_view: expected a sim tensor, got ", t.device());
  const auto& storage = t.storage();
  void* base = storage.mutable_data();
  if (base == nullptr) return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU));
  c10::Storage host(c10::Storage::use_byte_size_t(), storage.nbytes(), at::DataPtr(base, c10::kCPU), nullptr,
                    /*resizable=*/false);
  auto view = at::detail::make_tensor<c10::TensorImpl>(std::move(host), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return view;
}

// A host tensor of no elements over the bytes of fresh device tensor t, its storage resizable: a CPU out= kernel
// resizes it to its result (no warning: it had no elements) within t's bytes, writing device memory itself; a
// kernel that grows its out beyond them while it works (mse_loss.out: elementwise, then reduced) moves it to host
// memory, and Kernel copies the result back, as it does where the kernel chose other strides than t's.
at::Tensor empty_host_view(const at::Tensor& t) {
  const auto& storage = t.storage();
  c10::Storage host(c10::Storage::use_byte_size_t(), storage.nbytes(), at::DataPtr(storage.mutable_data(), c10::kCPU),
                    c10::GetCPUAllocator(), /*resizable=*/true);
  auto view = at::detail::make_tensor<c10::TensorImpl>(std::move(host), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  view.unsafeGetTensorImpl()->set_sizes_contiguous({0});
  return view;
}

const c10::OperatorHandle& find_op(const std::string& name, const std::string& overload) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, c10::OperatorHandle> ops;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(name, overload);
  auto it = ops.find(key);
  if (it == ops.end()) {
    it = ops.emplace(key, c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str())).first;
  }
  return it->second;
}

void flatten_tensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isNone()) {
    out.emplace_back();
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorVector()) out.push_back(t);
  } else if (value.isList()) {
    for (const c10::IValue& v : value.toListRef()) flatten_tensors(v, out);
  } else if (value.isTuple()) {
    for (const c10::IValue& v : value.toTupleRef().elements()) flatten_tensors(v, out);
  }
}

// Whether a and b lay the same elements out alike in one dense block of memory each (not a ZeroTensor, which has
// none: `_efficientzerotensor`, sgn's backward): then a memcpy copies one into the other.
bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         !a.is_conj() && !a.is_neg() && !b.is_conj() && !b.is_neg() && !a._is_zerotensor() && !b._is_zerotensor() &&
         a.numel() > 0 && a.is_non_overlapping_and_dense() && a.data_ptr() != nullptr && b.data_ptr() != nullptr;
}

// One kernel: a boxed op on host views (`stack`); `outputs` (host views of the sim outputs) receive its
// results in order (see launch). The views are dropped once it has run.
struct Kernel {
  c10::OperatorHandle op;
  std::shared_ptr<torch::jit::Stack> stack;
  std::vector<std::optional<at::Tensor>> outputs;

  void operator()() {
    c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
    c10::InferenceMode inference;  // host views of inference tensors may be written in place here
    op.callBoxed(*stack);
    if (!outputs.empty()) {
      std::vector<at::Tensor> results;
      for (const auto& v : *stack) flatten_tensors(v, results);
      TORCH_CHECK(results.size() == outputs.size(), "sim: ", op.schema().name(), " returned ", results.size(),
                  " tensors where ", outputs.size(), " were expected");
      for (size_t i = 0; i < results.size(); ++i) {
        if (!outputs[i].has_value() || !outputs[i]->defined() || !results[i].defined()) continue;
        // An auxiliary output one side leaves empty is unused: the device's copy keeps the meta (CUDA)
        // shape. The CPU kernel leaves batch norm's saved statistics empty in eval (the copy stays
        // uninitialised); it fills embedding_bag's max_indices for sum and mean, which CUDA's and the meta
        // kernel leave empty (the copy stays empty).
        if ((results[i].numel() == 0) != (outputs[i]->numel() == 0)) continue;
        const at::Tensor& result = results[i];
        at::Tensor& out = *outputs[i];
        if (result.data_ptr() == out.data_ptr() && result.sizes() == out.sizes() && result.strides() == out.strides()) {
          continue;  // written in place (empty_host_view)
        }
        if (same_dense_layout(result, out) && result.storage().data() != out.storage().data()) {
          std::memcpy(out.data_ptr(), result.data_ptr(), result.numel() * result.element_size());  // copy_'s cost, less
          continue;
        }
        // the same memory in another layout (empty_host_view, other strides): copied through a clone
        out.copy_(result.storage().data() == out.storage().data() ? result.clone() : result);
      }
    }
    stack->clear();
    outputs.clear();
  }
};

// Runs `kernel` on `stream`: on the calling thread where the stream is idle (try_inline, the GIL let go
// meanwhile), else queued for the stream's worker. Either way a failure surfaces at the next call.
uint64_t submit_kernel(Stream* stream, Kernel kernel) {
  stream->raise_pending_error();
  uint64_t ticket = 0;
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release release;
    ticket = stream->try_inline(kernel);
  } else {
    ticket = stream->try_inline(kernel);
  }
  return ticket != 0 ? ticket : stream->push(std::move(kernel));
}

// Queue op(*args, **kwargs) -- whose tensors are host views already -- on the current stream of
// `device`; `outputs` (host views of the sim outputs) receive the results in order. With
// `outputs` empty the op writes its results itself (in-place and out= ops); a None entry is a
// result written in place. The sim memory the views point into outlives the kernel without
// holding the tensors: a freed block is reused only once every queue of its device has passed
// the free (free_block).
uint64_t launch(int device, const std::string& name, const std::string& overload, py::tuple args, py::dict kwargs,
                std::vector<std::optional<at::Tensor>> outputs) {
  const auto& op = find_op(name, overload);
  auto stack = std::make_shared<torch::jit::Stack>(torch::jit::createStackForSchema(
      op.schema(), torch::jit::tuple_slice(std::move(args)), py::reinterpret_borrow<py::kwargs>(kwargs), std::nullopt));
  return submit_kernel(current_stream_of(device), Kernel{op, std::move(stack), std::move(outputs)});
}

// -- the fast path: common ops with no Python at all (issue 32) -----------------------------------------
//
// The PrivateUse1 fallback is this C++ function. It takes the common case itself -- an op returning
// Tensors, fresh or written into its arguments (in-place, out=; no views), not random nor data-dependent,
// whose tensors are all on one sim device (CPU scalars aside), the race checker off -- exactly as the
// Python fallback's asynchronous path does it: outputs' metadata from the op's Meta kernel (kept per call
// signature), fresh outputs allocated on the device, the CPU kernel run on host views (at once on an idle
// stream, else queued). A structured op's functional and in-place variants come here directly (structured_ops), as do
// copies with host memory (fast_copy) and item() (fast_item). Everything else, and any call
// whose Meta kernel fails, goes to the Python fallback (_kernels.py), registered on PrivateUse2 (a
// backend nothing else uses) and reached by redispatching there.

std::atomic<bool> g_fast{true};
constexpr c10::DispatchKey kPythonFallbackKey = c10::DispatchKey::PrivateUse2;

// What the fast path knows of an op's schema: whether it may take the op at all, and for each return the
// argument it is written into (in-place and out= ops: Tensor(a!) arguments), -1 for a fresh tensor, or
// kFreshList for a fresh Tensor[] (a foreach op's only return).
constexpr int kFreshList = -2;

struct FastSchema {
  mutable std::atomic<bool> ok{false};  // cleared (refuse_fast) where the op turns out to have no Meta kernel
  bool foreach = false;  // a _foreach_ op: taken whole (one kernel for its lists), Scalars signed by kind
  std::vector<int> sources;
  // A structured op's functional variant: its out= overload, whose CPU kernel writes the fresh outputs' device
  // memory through their host views (no CPU output allocated, then copied).
  std::optional<c10::OperatorHandle> out_op;
  // Per argument of a pointwise or foreach op: 1 a Number, 2 a Number[] (signed by kind, see sign_scalar_by_kind).
  std::vector<int8_t> numbers;
};

int8_t number_argument(const c10::Argument& argument) {
  auto type = argument.type();
  if (type->kind() == c10::TypeKind::OptionalType) type = type->castRaw<c10::OptionalType>()->getElementType();
  if (type->kind() == c10::TypeKind::NumberType) return 1;
  const bool list = type->kind() == c10::TypeKind::ListType;
  return list && type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::NumberType ? 2 : 0;
}

bool is_tensor_list(const c10::TypePtr& type) {
  return type->kind() == c10::TypeKind::ListType && type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType;
}

// The out= overload of functional `op`: the same arguments, then one written keyword-only Tensor per
// return (`add.out` of `add.Tensor`, `sum.IntList_out` of `sum.dim_IntList`, `nll_loss_backward.grad_input`).
std::optional<c10::OperatorHandle> out_overload(const c10::OperatorHandle& op) {
  static const auto overloads = [] {  // every op name's overloads, listed once
    std::unordered_map<std::string, std::vector<std::string>> found;
    for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) found[name.name].push_back(name.overload_name);
    return found;
  }();
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t n = schema.returns().size();
  auto it = overloads.find(schema.name());
  if (it == overloads.end() || n == 0) return std::nullopt;
  for (const auto& overload : it->second) {
    auto candidate = c10::Dispatcher::singleton().findOp({schema.name(), overload});
    if (!candidate || !candidate->hasKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
    const auto& other = candidate->schema();
    if (other.arguments().size() != arguments.size() + n || other.returns().size() != n) continue;
    bool same = true;
    for (size_t i = 0; i < other.arguments().size() && same; ++i) {
      const auto& a = other.arguments()[i];
      if (i < arguments.size()) {
        same = a.name() == arguments[i].name() && *a.type() == *arguments[i].type() && a.alias_info() == nullptr;
      } else {
        same = a.kwarg_only() && a.type()->kind() == c10::TypeKind::TensorType && a.alias_info() != nullptr &&
               a.alias_info()->isWrite();
      }
    }
    if (same) return *candidate;
  }
  return std::nullopt;
}

// A structured op's functional and in-place variants reach a backend without a kernel of its own through
// torch's CompositeExplicitAutogradNonFunctional wrapper, which runs the op's meta function (a TensorIterator
// build, say) and then the out= variant -- whose CPU kernel builds it again.
bool is_structured(const c10::OperatorHandle& op) {
  return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
}

std::unique_ptr<FastSchema> fast_schema(const c10::OperatorHandle& op) {
  static const std::unordered_set<std::string> python_only = {
      "aten::_copy_from", "aten::_copy_from_and_resize", "aten::copy_", "aten::_local_scalar_dense",
      "aten::record_stream", "aten::_foreach_copy_"};
  const auto& schema = op.schema();
  auto made = std::make_unique<FastSchema>();
  FastSchema& out = *made;
  out.foreach = schema.name().rfind("aten::_foreach_", 0) == 0;
  if (out.foreach || op.hasTag(at::Tag::pointwise)) {
    for (const auto& a : schema.arguments()) out.numbers.push_back(number_argument(a));
  }
  if (python_only.count(schema.name()) || (schema.returns().empty() && !out.foreach)) return made;
  for (auto tag : {at::Tag::dynamic_output_shape, at::Tag::data_dependent_output, at::Tag::nondeterministic_seeded}) {
    if (op.hasTag(tag)) return made;
  }
  const auto& arguments = schema.arguments();
  bool writes = false;
  for (const auto& a : arguments) {  // written single tensors only (a foreach op's written lists aside): no views
    if (a.alias_info() == nullptr) continue;
    const bool list = out.foreach && is_tensor_list(a.type());
    if (!a.alias_info()->isWrite() || (a.type()->kind() != c10::TypeKind::TensorType && !list)) return made;
    writes = true;
  }
  if (schema.returns().empty() && !writes) return made;  // a foreach op returning nothing writes its lists
  for (const auto& r : schema.returns()) {
    if (out.foreach && is_tensor_list(r.type()) && r.alias_info() == nullptr && schema.returns().size() == 1) {
      out.sources.push_back(kFreshList);
      continue;
    }
    if (r.type()->kind() != c10::TypeKind::TensorType) return made;
    int source = -1;
    if (r.alias_info() != nullptr) {
      for (size_t i = 0; i < arguments.size() && source < 0; ++i) {
        const auto* alias = arguments[i].alias_info();
        if (alias != nullptr && alias->beforeSets() == r.alias_info()->beforeSets()) source = static_cast<int>(i);
      }
      if (source < 0 || !r.alias_info()->isWrite()) return made;
    }
    out.sources.push_back(source);
  }
  const bool all_fresh = std::all_of(out.sources.begin(), out.sources.end(), [](int s) { return s == -1; });
  if (all_fresh && is_structured(op)) out.out_op = out_overload(op);
  out.ok = true;
  return made;
}

std::mutex g_fast_ops_mu;
// per op: may the fast path take it, and how (entries never removed, so a reference to one stays valid)
std::unordered_map<c10::OperatorHandle, std::unique_ptr<FastSchema>> g_fast_ops;

const FastSchema& fast_op(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(g_fast_ops_mu);
  auto it = g_fast_ops.find(op);
  if (it == g_fast_ops.end()) it = g_fast_ops.emplace(op, fast_schema(op)).first;
  return *it->second;
}

void refuse_fast(const c10::OperatorHandle& op) { fast_op(op).ok.store(false); }

bool is_sim(const at::Tensor& t) { return t.defined() && t.device().type() == kSim; }

// A number's kind (1 float, 2 int, 3 complex, 4 bool), 0 for anything else.
int64_t number_kind(const c10::IValue& v) {
  return v.isDouble() ? 1 : v.isInt() ? 2 : v.isComplexDouble() ? 3 : v.isBool() ? 4 : 0;
}

// The device of the call's sim tensors where the fast path can take it, else -1: every tensor on one
// sim device or a CPU scalar (as the Python path's device discipline allows), no device or generator.
int fast_device(c10::ArrayRef<c10::IValue> args) {
  int device = -1;
  bool ok = true;
  auto take = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.device().type() == kSim) {
      if (device < 0) device = t.device().index();
      ok = ok && device == t.device().index();
    } else {
      ok = ok && t.device().is_cpu() && t.dim() == 0;
    }
  };
  for (const auto& v : args) {
    if (v.isTensor()) {
      take(v.toTensor());
    } else if (v.isTensorList() || (v.isList() && !v.isIntList() && !v.isDoubleList() && !v.isBoolList())) {
      for (const c10::IValue& e : v.toListRef()) {  // tensors, Nones, or numbers (a Scalar[])
        if (e.isTensor()) take(e.toTensor());
        else ok = ok && (e.isNone() || number_kind(e) != 0);
      }
    } else {
      ok = ok && !v.isDevice() && !v.isGenerator() && !v.isObject() && !v.isCapsule();
    }
    if (!ok) return -1;
  }
  return device;
}

// `v` with each sim tensor replaced by fn(tensor), lists included.
template <typename F>
c10::IValue map_sim(const c10::IValue& v, const F& fn) {
  if (v.isTensor()) return is_sim(v.toTensor()) ? c10::IValue(fn(v.toTensor())) : v;
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const c10::IValue& e : v.toListRef()) out.push_back(is_sim(e.toTensor()) ? fn(e.toTensor()) : e.toTensor());
    return out;
  }
  if (v.isList() && !v.isIntList() && !v.isDoubleList() && !v.isBoolList()) {
    auto list = v.toList();
    c10::impl::GenericList out(list.elementType());
    for (const c10::IValue& e : v.toListRef()) out.push_back(map_sim(e, fn));
    return out;
  }
  return v;
}

// A meta tensor with t's metadata over a storage of t's size (what Fallback.to_meta makes).
at::Tensor meta_like(const at::Tensor& t) {
  const int64_t itemsize = std::max<int64_t>(static_cast<int64_t>(t.dtype().itemsize()), 1);
  const int64_t elements = std::max<int64_t>(static_cast<int64_t>(t.storage().nbytes()) / itemsize, 1);
  auto base = at::empty({elements}, t.options().device(c10::kMeta));
  return base.as_strided(t.sizes(), t.strides(), t.storage_offset());
}

// -- the fast path's plans: Meta kernel results per call signature --------------------------------------
//
// A training step repeats the same calls, and many Meta kernels are Python decompositions costing 100s of
// microseconds, so the outputs' metadata is kept per (op, signature), as Fallback.meta keeps it in Python.
// The signature is everything a Meta kernel can read: each tensor's dtype, sizes, strides, offset, device
// type and flags (never its values), every other argument's value, and the default dtype.

using Signature = std::vector<int64_t>;

struct SignatureHash {
  size_t operator()(const Signature& s) const noexcept {
    size_t h = s.size();
    for (int64_t v : s) h = c10::hash_combine(h, std::hash<int64_t>{}(v));
    return h;
  }
};

struct OutputMeta {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
};

using Plan = std::vector<OutputMeta>;

constexpr size_t kPlans = 8192;  // plans kept; emptied when full (Python's _PLANS)
std::mutex g_plans_mu;
std::unordered_map<Signature, std::shared_ptr<const Plan>, SignatureHash> g_plans;

void sign_tensor(const at::Tensor& t, Signature& out) {
  if (!t.defined()) {
    out.push_back(-1);
    return;
  }
  out.push_back(static_cast<int64_t>(t.device().type()));
  out.push_back(static_cast<int64_t>(t.scalar_type()));
  out.push_back(t.unsafeGetTensorImpl()->is_wrapped_number() | (t.is_conj() << 1) | (t.is_neg() << 2));
  out.push_back(t.dim());
  out.insert(out.end(), t.sizes().begin(), t.sizes().end());
  out.insert(out.end(), t.strides().begin(), t.strides().end());
  out.push_back(t.storage_offset());
}

// Appends v's signature; false where v is of a kind not described (that call is not cached).
bool sign(const c10::IValue& v, Signature& out) {
  int64_t bits = 0;
  if (v.isTensor()) {
    out.push_back(1);
    sign_tensor(v.toTensor(), out);
  } else if (v.isNone()) {
    out.push_back(2);
  } else if (v.isInt()) {
    out.insert(out.end(), {3, v.toInt()});
  } else if (v.isBool()) {
    out.insert(out.end(), {4, v.toBool()});
  } else if (v.isDouble()) {
    double d = v.toDouble();
    std::memcpy(&bits, &d, sizeof bits);
    out.insert(out.end(), {5, bits});
  } else if (v.isComplexDouble()) {
    auto c = v.toComplexDouble();
    out.push_back(6);
    for (double d : {c.real(), c.imag()}) {
      std::memcpy(&bits, &d, sizeof bits);
      out.push_back(bits);
    }
  } else if (v.isString()) {
    out.insert(out.end(), {7, static_cast<int64_t>(std::hash<std::string>{}(v.toStringRef()))});
  } else if (v.isList()) {
    const auto& items = v.toListRef();
    out.insert(out.end(), {8, static_cast<int64_t>(items.size())});
    for (const c10::IValue& e : items) {
      if (!sign(e, out)) return false;
    }
  } else {
    return false;
  }
  return true;
}

// A pointwise op's outputs follow from its tensors alone: a Scalar argument counts by its kind (int,
// float, complex, bool), not its value -- an optimizer's step sizes change every step, and a plan per
// value would fill the cache with Meta kernel runs. A foreach op's Scalar[] (Adam's bias corrections)
// counts by its length and kinds.
bool sign_scalar_by_kind(int8_t number, const c10::IValue& v, Signature& out) {
  if (number == 1 && number_kind(v) != 0) {
    out.insert(out.end(), {9, number_kind(v)});
    return true;
  }
  if (number != 2 || !v.isList()) return false;
  const auto& items = v.toListRef();
  out.insert(out.end(), {10, static_cast<int64_t>(items.size())});
  for (const c10::IValue& e : items) {
    if (number_kind(e) == 0) return false;
    out.push_back(number_kind(e));
  }
  return true;
}

// The call's signature, built in `key` (a buffer reused per thread: no allocation per call); false where
// an argument is of a kind not described (that call is not cached).
bool signature_of(const c10::OperatorHandle& op, const FastSchema& how, c10::ArrayRef<c10::IValue> args, Signature& key) {
  key.clear();
  key.push_back(static_cast<int64_t>(std::hash<c10::OperatorHandle>{}(op)));
  key.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  for (size_t i = 0; i < args.size(); ++i) {
    if (i < how.numbers.size() && how.numbers[i] != 0 && sign_scalar_by_kind(how.numbers[i], args[i], key)) continue;
    if (!sign(args[i], key)) return false;
  }
  return true;
}

// The op's outputs as its Meta kernel shapes them, or nothing where it cannot (no Meta kernel: the op is
// left to Python from now on; any other error: Python runs the call and raises it as it does).
std::optional<std::vector<at::Tensor>> meta_outputs(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  torch::jit::Stack meta;
  meta.reserve(args.size());
  for (const auto& v : args) meta.push_back(map_sim(v, meta_like));
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const c10::NotImplementedError&) {
    refuse_fast(op);
    return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::vector<at::Tensor> out;
  for (const auto& v : meta) {
    if (v.isTensorList()) {  // a foreach op's fresh list
      for (const at::Tensor& t : v.toTensorVector()) out.push_back(t);
      continue;
    }
    if (!v.isTensor() || !v.toTensor().defined()) return std::nullopt;
    out.push_back(v.toTensor());
  }
  return out;
}

// The call's outputs' metadata: the plan kept for its signature, else its Meta kernel's (then kept). Plans
// are shared, never changed once made: a caller keeps its plan while the cache is emptied.
std::shared_ptr<const Plan> plan_of(const c10::OperatorHandle& op, const FastSchema& how, c10::ArrayRef<c10::IValue> args) {
  thread_local Signature key;
  const bool keyed = signature_of(op, how, args, key);
  if (keyed) {
    std::lock_guard<std::mutex> lock(g_plans_mu);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) return it->second;
  }
  auto metas = meta_outputs(op, args);
  if (!metas) return nullptr;
  auto plan = std::make_shared<Plan>();
  for (const auto& m : *metas) plan->push_back({m.sizes().vec(), m.strides().vec(), m.scalar_type()});
  if (keyed) {
    std::lock_guard<std::mutex> lock(g_plans_mu);
    if (g_plans.size() >= kPlans) g_plans.clear();
    g_plans.emplace(key, plan);
  }
  return plan;
}

int64_t largest_numel(c10::ArrayRef<c10::IValue> args) {
  int64_t largest = 0;
  for (const auto& v : args) {
    if (v.isTensor() && v.toTensor().defined()) largest = std::max(largest, v.toTensor().numel());
    if (v.isTensorList() || (v.isList() && !v.isIntList() && !v.isDoubleList() && !v.isBoolList())) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor() && e.toTensor().defined()) largest = std::max(largest, e.toTensor().numel());
      }
    }
  }
  return largest;
}

bool fast_path(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (!g_fast.load(std::memory_order_relaxed) || g_race.load(std::memory_order_relaxed)) return false;
  const FastSchema& how = fast_op(op);
  if (!how.ok.load(std::memory_order_relaxed)) return false;
  const auto& arguments = op.schema().arguments();
  const size_t nargs = arguments.size();
  auto args = torch::jit::last(*stack, nargs);
  const int device = fast_device(args);
  if (device < 0) return false;
  at::AutoDispatchBelowADInplaceOrView below;
  const auto plan = plan_of(op, how, args);
  const bool fresh_list = how.sources.size() == 1 && how.sources[0] == kFreshList;
  if (!plan || (plan->size() != how.sources.size() && !fresh_list)) return false;
  for (size_t i = 0; i < how.sources.size(); ++i) {  // a written tensor the op would resize: Python resizes it first
    const int source = how.sources[i];
    if (source >= 0 && (!is_sim(args[source].toTensor()) || args[source].toTensor().sizes() != (*plan)[i].sizes)) return false;
  }
  auto host = std::make_shared<torch::jit::Stack>();
  host->reserve(nargs);
  for (const auto& v : args) host->push_back(map_sim(v, host_view));
  const c10::Device where(kSim, static_cast<c10::DeviceIndex>(device));
  std::vector<c10::IValue> results;
  std::vector<std::optional<at::Tensor>> outputs;
  bool copied = false;
  auto fresh = [&](const OutputMeta& m) {  // a device tensor for an output; the kernel's result is copied in
    at::Tensor made = empty_strided(m.sizes, m.strides, m.dtype, std::nullopt, where, std::nullopt);
    outputs.emplace_back(host_view(made));
    copied = true;
    return made;
  };
  if (how.out_op) {  // a structured op's functional variant: its out= kernel writes the fresh outputs
    for (const auto& m : *plan) {
      results.emplace_back(empty_strided(m.sizes, m.strides, m.dtype, std::nullopt, where, std::nullopt));
      host->push_back(empty_host_view(results.back().toTensor()));
      outputs.emplace_back(host_view(results.back().toTensor()));
    }
    copied = true;
  }
  if (fresh_list) {
    c10::List<at::Tensor> made;
    for (const auto& m : *plan) made.push_back(fresh(m));
    results.emplace_back(std::move(made));
  }
  const int64_t largest = largest_numel(args);
  for (size_t i = 0; i < plan->size() && !fresh_list && !how.out_op; ++i) {
    const int source = how.sources[i];
    if (source < 0) {
      results.emplace_back(fresh((*plan)[i]));
      continue;
    }
    const at::Tensor& written = args[source].toTensor();
    results.emplace_back(written);
    // An out= tensor smaller than an input gets a scratch CPU out, its result copied back (see _outgrown in
    // _kernels.py: CPU kernels may grow their out while they work, and host views cannot grow).
    if (arguments[source].kwarg_only() && written.numel() < largest) {
      (*host)[source] = at::empty({0}, written.options().device(c10::kCPU));
      outputs.emplace_back(host_view(written));
      copied = true;
    } else {
      outputs.emplace_back(std::nullopt);  // written in place through its host view
    }
  }
  if (!copied) outputs.clear();
  submit_kernel(current_stream_of(device), Kernel{how.out_op.value_or(op), std::move(host), std::move(outputs)});
  torch::jit::drop(*stack, nargs);
  for (auto& r : results) stack->emplace_back(std::move(r));
  return true;
}

// A copy into sim memory refuses what the CPU's and CUDA's copy_ refuse (their TensorIterator checks, which torch's
// copy_ skips before handing a PrivateUse1 copy to _copy_from): a written tensor with elements sharing memory, and
// a source partly overlapping it (x[1:].copy_(x[:-1]) would otherwise give whatever the host's loop order gives).
void check_copy_overlap(const at::Tensor& dst, const at::Tensor& src) {
  if (!is_sim(dst)) return;
  at::assert_no_internal_overlap(dst);
  if (is_sim(src)) at::assert_no_partial_overlap(dst, src);
}

// `_copy_from(src, dst, non_blocking)` (what `copy_`, `.to`, `.cpu()` reach) between host memory and a sim
// device or within one, as the Python fallback's copy does it: the CPU's copy_ on host views, on the current
// stream of the sim side's device; a copy with host memory then waits for that stream, unless it is non_blocking
// from or to pinned memory (CUDA's rule). Lazy conjugate or negative bits, two devices, other layouts, the race
// checker on: Python.
bool fast_copy(torch::jit::Stack* stack) {
  if (!g_fast.load(std::memory_order_relaxed) || g_race.load(std::memory_order_relaxed)) return false;
  auto args = torch::jit::last(*stack, 3);
  if (!args[0].isTensor() || !args[1].isTensor() || !args[2].isBool()) return false;
  const at::Tensor& src = args[0].toTensor();
  const at::Tensor& dst = args[1].toTensor();
  auto plain = [](const at::Tensor& t) {
    return t.defined() && t.layout() == c10::kStrided && !t.is_conj() && !t.is_neg() && (t.is_cpu() || is_sim(t));
  };
  if (!plain(src) || !plain(dst) || (src.is_cpu() && dst.is_cpu())) return false;
  if (is_sim(src) && is_sim(dst) && src.device() != dst.device()) return false;
  const int device = (is_sim(dst) ? dst : src).device().index();
  const bool host = src.is_cpu() || dst.is_cpu();
  check_copy_overlap(dst, src);
  static const auto& copy = find_op("aten::copy_", "");
  auto kernel = std::make_shared<torch::jit::Stack>();
  kernel->push_back(is_sim(dst) ? host_view(dst) : dst);
  kernel->push_back(is_sim(src) ? host_view(src) : src);
  kernel->push_back(false);  // non_blocking: between host memory, nothing to overlap
  Stream* stream = current_stream_of(device);
  submit_kernel(stream, Kernel{copy, std::move(kernel), {}});
  const at::Tensor& host_side = src.is_cpu() ? src : dst;
  if (host && !(args[2].toBool() && is_pinned(host_side.storage().data()))) stream->synchronize();
  at::Tensor result = dst;
  torch::jit::drop(*stack, 3);
  stack->emplace_back(std::move(result));
  return true;
}

// `_local_scalar_dense` (`.item()`, a loss read every step): the host waits for the tensor's device's current
// stream, then reads the value, as the Python fallback does. The race checker on: Python.
bool fast_item(torch::jit::Stack* stack) {
  if (!g_fast.load(std::memory_order_relaxed) || g_race.load(std::memory_order_relaxed)) return false;
  const c10::IValue& arg = stack->back();
  if (!arg.isTensor() || !is_sim(arg.toTensor()) || arg.toTensor().layout() != c10::kStrided) return false;
  const at::Tensor t = arg.toTensor();
  current_stream_of(t.device().index())->synchronize();
  c10::Scalar value = at::_local_scalar_dense(host_view(t));
  stack->pop_back();
  stack->emplace_back(value);
  return true;
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  static const auto& copy_from = find_op("aten::_copy_from", "");
  static const auto& local_scalar_dense = find_op("aten::_local_scalar_dense", "");
  const bool done = op == copy_from ? fast_copy(stack) : op == local_scalar_dense ? fast_item(stack) : fast_path(op, stack);
  if (!done) op.redispatchBoxed(c10::DispatchKeySet(kPythonFallbackKey), stack);
}

// A foreach op (`_foreach_add_`, Adam's `_foreach_lerp_` ...) has a composite kernel that the dispatcher
// prefers to a fallback: it loops over the lists calling the per-tensor op, each a launch of its own (six
// for a six-parameter model). sim registers this kernel for them instead, as a GPU has its own: the fast
// path takes the op whole (one launch running the CPU's foreach kernel on host views); a call it leaves
// (devices mixed, the race checker on) runs the composite loop as before, its per-tensor ops taking their
// usual paths. The CPU's entry for these ops is that composite kernel.
void foreach_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  if (!fast_path(op, stack)) op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// The foreach ops whose only kernel is the composite one (no CPU kernel of their own, none for sim).
std::vector<std::string> composite_foreach_ops() {
  std::vector<std::string> found;
  for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::_foreach_", 0) != 0 || name.name == "aten::_foreach_copy_") continue;
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
        op->hasKernelForDispatchKey(c10::DispatchKey::CPU) || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    found.push_back(name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name));
  }
  return found;
}

// The structured ops' functional and in-place variants (`add.Tensor`, `addmm`, `mm`, `sum.dim_IntList`, `add_`
// ...), which reach a backend without a kernel of its own through torch's CompositeExplicitAutogradNonFunctional
// wrapper: its meta function, then the out= variant, whose CPU kernel repeats that meta function. sim registers
// its fallback for them instead, as a GPU has its own kernels: the fast path's plan stands for the meta function
// and the CPU's out= kernel writes the fresh outputs (FastSchema::out_op). A call the fast path leaves goes to
// PrivateUse2, whose entry for these ops is that wrapper (the Python fallback there is only a fallback), as before.
std::vector<std::string> structured_ops() {
  std::vector<std::string> found;
  for (const auto& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !is_structured(*op) || !op->hasKernelForDispatchKey(c10::DispatchKey::CPU)) continue;
    bool taken = false;
    for (auto key : {c10::DispatchKey::PrivateUse1, kPythonFallbackKey, c10::DispatchKey::CompositeExplicitAutograd,
                     c10::DispatchKey::CompositeImplicitAutograd}) {
      taken = taken || op->hasKernelForDispatchKey(key);
    }
    if (taken || !fast_op(*op).ok.load()) continue;
    found.push_back(name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name));
  }
  return found;
}

void install_fallback() {
  static torch::Library* library = nullptr;  // kept for the life of the process, as the registration
  if (library != nullptr) return;
  library = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  library->fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
  auto* own = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const auto& name : composite_foreach_ops()) {
    own->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&foreach_kernel>());
  }
  for (const auto& name : structured_ops()) own->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

// -- race checking: the accesses ------------------------------------------------------------------------

Block* block_of(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return nullptr;
  const auto& data = t.storage().data_ptr();
  return data.get_deleter() == &free_block ? static_cast<Block*>(data.get_context()) : nullptr;
}

// A kernel of `op` about to be queued on `device`'s current stream reads tensors[i] (writes it where
// writes[i]). It ticks the stream's clock and checks each block's history: None when every earlier
// conflicting access is ordered before this kernel (and the accesses are recorded), else the first race as
// (index, kind, other op, other device, other stream id, this stream id), with nothing recorded.
py::object race_access(int device, const std::string& op, const std::vector<at::Tensor>& tensors,
                       const std::vector<bool>& writes) {
  check_device(device);
  TORCH_CHECK(tensors.size() == writes.size(), "race_access: one write flag per tensor");
  Stream* stream = current_stream_of(device);
  const int me = race_slot(stream);
  const size_t slots = static_cast<size_t>(g_device_count * (kPoolStreams + 1));
  std::lock_guard<std::mutex> lock(g_race_mu);
  VectorClock& clock = stream->clock;
  if (clock.size() < slots) clock.resize(slots, 0);
  join_clock(clock, g_host_clock);
  const uint64_t tick = ++clock[me];
  auto ordered = [&](const Access& a) { return a.slot < 0 || clock[a.slot] >= a.tick; };
  auto race = [&](size_t i, const char* kind, const Access& other) -> py::object {
    return py::make_tuple(i, kind, other.op, other.slot / (kPoolStreams + 1), other.slot % (kPoolStreams + 1), stream->id);
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    Block* block = block_of(tensors[i]);
    if (block == nullptr || !block->history) continue;
    const History& h = *block->history;
    if (!ordered(h.write)) return race(i, writes[i] ? "write-after-write" : "read-after-write", h.write);
    if (writes[i]) {
      for (const Access& read : h.reads) {
        if (!ordered(read)) return race(i, "write-after-read", read);
      }
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    Block* block = block_of(tensors[i]);
    if (block == nullptr) continue;
    if (!block->history) block->history = std::make_unique<History>();
    History& h = *block->history;
    if (writes[i]) {
      h.write = {me, tick, op};
      h.reads.clear();
      continue;
    }
    auto same = std::find_if(h.reads.begin(), h.reads.end(), [&](const Access& a) { return a.slot == me; });
    if (same == h.reads.end()) {
      h.reads.push_back({me, tick, op});
    } else {
      same->tick = tick;
      same->op = op;
    }
  }
  return py::none();
}

void race_enable(bool on) {
  if (on && !g_race.load()) {  // what ran before is taken as finished, as if the host had synchronized every device
    for (int d = 0; d < g_device_count; ++d) race_learn(device_clock(d));
  }
  g_race.store(on);
}

// Stream (device, id) waits for the work queued so far on stream (src_device, src_id), as wait_stream.
void wait_stream(int device, int64_t id, int src_device, int64_t src_id) {
  auto ev = std::make_shared<Event>();
  record_event(ev, get_stream(src_device, src_id), false);
  block_on_event(ev, get_stream(device, id));
}

uint64_t enqueue_sleep(int device, double ms) {
  return current_stream_of(device)->push([ms] {
    std::this_thread::sleep_until(Clock::now() + std::chrono::duration<double, std::milli>(ms));
  });
}

py::dict memory_stats(int device) {
  auto stats = g_allocator.getDeviceStats(static_cast<c10::DeviceIndex>(device));
  py::dict out;
  auto put_array = [&](const std::string& name, const c10::CachingAllocator::StatArray& arr) {
    const char* pools[] = {"all", "small_pool", "large_pool"};
    for (int p = 0; p < 3; ++p) {
      const auto& s = (p == 0) ? arr[0] : arr[p];
      for (auto [field, value] : {std::pair<const char*, int64_t>{"current", s.current}, {"peak", s.peak},
                                  {"allocated", s.allocated}, {"freed", s.freed}}) {
        out[py::str(name + "." + pools[p] + "." + field)] = value;
      }
    }
  };
  put_array("allocation", stats.allocation);
  put_array("segment", stats.segment);
  put_array("active", stats.active);
  put_array("inactive_split", stats.inactive_split);
  put_array("allocated_bytes", stats.allocated_bytes);
  put_array("reserved_bytes", stats.reserved_bytes);
  put_array("active_bytes", stats.active_bytes);
  put_array("inactive_split_bytes", stats.inactive_split_bytes);
  put_array("requested_bytes", stats.requested_bytes);
  out["num_alloc_retries"] = stats.num_alloc_retries;
  out["num_ooms"] = stats.num_ooms;
  out["num_sync_all_streams"] = stats.num_sync_all_streams;
  out["num_device_alloc"] = stats.num_device_alloc;
  out["num_device_free"] = stats.num_device_free;
  out["max_split_size"] = static_cast<int64_t>(-1);
  out["oversize_allocations.current"] = 0;
  out["oversize_allocations.peak"] = 0;
  out["oversize_allocations.allocated"] = 0;
  out["oversize_allocations.freed"] = 0;
  out["oversize_segments.current"] = 0;
  out["oversize_segments.peak"] = 0;
  out["oversize_segments.allocated"] = 0;
  out["oversize_segments.freed"] = 0;
  return out;
}

void on_fork_child() {
  // A forked child has none of the parent's worker threads: give it fresh, empty streams (the
  // parent's stream objects are left behind unused), as a GPU context is not inherited either.
  for (int d = 0; d < g_device_count; ++d) g_streams[d] = new DeviceStreams();
}

bool g_initialized = false;

// device_count may be 0: every physical device hidden by the visible-devices variable, as a CUDA
// process with CUDA_VISIBLE_DEVICES="" has a runtime and no device.
void init(int device_count, int64_t capacity, int64_t clock_khz) {
  TORCH_CHECK(device_count >= 0 && device_count <= kMaxDevices, "sim: device count must be 0..", kMaxDevices,
              ", got ", device_count);
  TORCH_CHECK(!g_initialized || g_device_count == device_count, "sim: already initialised with ", g_device_count,
              " devices");
  if (g_initialized) return;
  g_initialized = true;
  for (int d = 0; d < device_count; ++d) {
    g_streams[d] = new DeviceStreams();
    g_memory[d] = new DeviceMemory();
    g_memory[d]->capacity = static_cast<size_t>(capacity);
  }
  g_clock_khz = clock_khz;
  g_device_count = device_count;
  at::RegisterPrivateUse1HooksInterface(new SimHooks());
  at::setHostAllocator(c10::DeviceType::PrivateUse1, &g_host_allocator);
  pthread_atfork(nullptr, nullptr, &on_fork_child);
}

}  // namespace sim

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace sim;
  m.def("init", &init);
  m.def("device_count", [] { return g_device_count; });
  m.def("current_device", [] { return tl_device; });
  m.def("set_device", [](int d) { check_device(d); tl_device = d; });
  m.def("current_stream", [](int d) { check_device(d); return tl_stream[d]; });
  m.def("set_stream", [](int d, int64_t id) { get_stream(d, id); tl_stream[d] = id; });
  m.def("stream_query", [](int d, int64_t id) { auto* s = get_stream(d, id); s->raise_pending_error(); return s->query(); });
  m.def("stream_synchronize", [](int d, int64_t id) { get_stream(d, id)->synchronize(); });
  m.def("synchronize", &synchronize_device_learning);
  m.def("wait_stream", &wait_stream);
  m.def("race_enable", &race_enable);
  m.def("race_enabled", [] { return g_race.load(); });
  m.def("race_access", &race_access);
  m.def("race_learn", [](int d, int64_t id) { race_learn(race_clock_of(get_stream(d, id))); });
  m.def("launch", &launch);
  m.def("install_fallback", &install_fallback);
  m.def("set_fast", [](bool on) { return g_fast.exchange(on); });
  m.def("sleep", &enqueue_sleep);
  m.def("host_view", &host_view);
  m.def("memory_stats", &memory_stats);
  m.def("reset_peak", [](int d) { g_allocator.resetPeakStats(static_cast<c10::DeviceIndex>(d)); });
  m.def("reset_accumulated", [](int d) { g_allocator.resetAccumulatedStats(static_cast<c10::DeviceIndex>(d)); });
  m.def("empty_cache", [] { g_allocator.emptyCache({0, 0}); });
  m.def("mem_get_info", [](int d) { return g_allocator.getMemoryInfo(static_cast<c10::DeviceIndex>(d)); });
  m.def("set_memory_fraction", [](double f, int d) {
    check_device(d);
    TORCH_CHECK(f >= 0.0 && f <= 1.0, "Invalid fraction value: ", f, ". Allowed range: 0~1");
    std::lock_guard<std::mutex> lock(g_memory[d]->mu);
    g_memory[d]->fraction = f;
  });
  m.def("get_memory_fraction", [](int d) { check_device(d); return g_memory[d]->fraction; });
  m.def("capacity", [](int d) { check_device(d); return static_cast<int64_t>(g_memory[d]->capacity); });
  m.def("clock_khz", [] { return g_clock_khz; });
  m.def("default_generator", [](int d) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(d))));
  });
  m.def("check_copy_overlap", &check_copy_overlap);
  m.def("is_pinned", [](const at::Tensor& t) { return is_pinned(t.storage().data()); });
}
