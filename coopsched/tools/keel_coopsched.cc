// SPDX-License-Identifier: Apache-2.0
// keel-coopsched: the per-worker cooperative scheduler daemon (issue 3).
#include <getopt.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "coopsched_service.h"
#include "cs-pidns.h"
#include "nf_socket.h"
#include "cs-rt.h"
#include "cs-sched.h"

namespace {

constexpr char kUsage[] =
    "usage: keel-coopsched --cores LIST [options]\n"
    "\n"
    "Runs the NF threads of chain instances (sgroups) to completion, batch by batch,\n"
    "on the managed cores with SCHED_FIFO (Galleon 4.3.1). One enforcer thread per\n"
    "managed core, pinned there at the highest FIFO priority, attaches and detaches\n"
    "sgroups and runs the yield watchdog; the daemon's other threads stay on the\n"
    "other cores, which remain with CFS. Must run as root.\n"
    "\n"
    "Two sockets, both created mode 0600. The admin socket (--listen) serves the whole\n"
    "API to the agent and is never mounted into a container. The NF socket\n"
    "(--nf-listen), which the agent mounts into NF containers, serves RegisterThread\n"
    "only, and only for a thread of the calling process itself: keel-coopsched accepts\n"
    "its connections itself and knows each caller by SO_PEERCRED (its pid) and its\n"
    "start time (/proc/PID/stat). RegisterThread there is refused (PERMISSION_DENIED,\n"
    "\"check NAME: ...\") unless: the caller still runs as the process that connected\n"
    "(caller); pid_ns is its own PID namespace (pid-ns); tid is one of its threads\n"
    "(thread); pktbuf_path is <pktbuf-dir>/<group>/pktbuf (pktbuf-path); the caller sees\n"
    "that instance directory, the very one keel-coopsched has at that path, which only\n"
    "the instance's own containers have mounted (instance-dir); and the buffer is a\n"
    "regular file there, not a symlink (pktbuf-file). Every other method is refused\n"
    "(method). Refusals are counted in Status (refused, by check) and posted as\n"
    "\"refused\" events, at most one a second per check.\n"
    "\n"
    "  --cores LIST             managed cores, e.g. 1 or 1,3 or 2-5 (required;\n"
    "                           at least one core must stay unmanaged)\n"
    "  --listen unix:PATH       the admin socket, the whole API (default\n"
    "                           unix:/run/keel/coopsched.sock; the directory is created)\n"
    "  --nf-listen unix:PATH    the NF socket, RegisterThread of the caller's own thread\n"
    "                           (default: --listen's path with -nf before .sock,\n"
    "                           unix:/run/keel/coopsched-nf.sock)\n"
    "  --pktbuf-dir DIR         the agent's chain-buffer root (its --pktbuf-dir): an NF's\n"
    "                           buffer must be DIR/<group>/pktbuf (default /run/keel/pktbuf)\n"
    "  --pktbuf-in-pods         the instance directories are the NF Pods' own (Kubernetes:\n"
    "                           an emptyDir at DIR/<group> in the Pod) and not the host's\n"
    "                           DIR/<group>: instead of the instance-dir check, a group is\n"
    "                           bound to the buffer file its first announcer presents and\n"
    "                           later announcers must present the same file (weaker: a\n"
    "                           tenant that announces another instance's group first\n"
    "                           keeps that instance from forming)\n"
    "  --yield-timeout-us N     watchdog: an NF thread that runs N us without yielding\n"
    "                           while another thread of its core waits is demoted and\n"
    "                           its sgroup cut off (default 10000). Time the core itself\n"
    "                           was lost (the watchdog's own timer fired late: a VM's\n"
    "                           vCPU descheduled) is not held against the thread, up to\n"
    "                           N us more\n"
    "  --detach-timeout-us N    Detach waits at most N us for the batch boundary,\n"
    "                           then stops the chain anyway (default 500000)\n"
    "  --run-priority P         FIFO priority of attached NF threads (default 10)\n"
    "  --wait-priority P        how detached, stopped NF threads wait: 0 (the default)\n"
    "                           SCHED_OTHER, else SCHED_FIFO at P. Above 0 a detached\n"
    "                           NF killed while another chain runs on its core cannot\n"
    "                           get the CPU to exit (its FIFO priority is below the\n"
    "                           chain's); under SCHED_OTHER it exits through CFS (from\n"
    "                           Linux 6.12 the fair server gives CFS ~5% of the core)\n"
    "  --no-handoff-probe       skip measuring the handoff cost at start-up\n"
    "  --lock-dir DIR           where each managed core's lock file is, coopsched-cpuN.lock\n"
    "                           with the holder's pid (default /run/keel; created 0755).\n"
    "                           A second keel-coopsched for a core exits with code 2\n"
    "                           and names the pid that holds it\n"
    "  --state-file PATH|none   where the sgroups in service are written after every\n"
    "                           change (default <lock-dir>/coopsched.state). A\n"
    "                           keel-coopsched started after one that died (SIGKILL, a\n"
    "                           crash) takes them back from it: each sgroup whose threads\n"
    "                           all still live (same tids and start times) is registered\n"
    "                           again and attached to the core it had, and its NFs do\n"
    "                           nothing; between the two, the guardian has let them run\n"
    "                           under CFS. The others are dropped (\"not-adopted\" events)\n"
    "                           and the agent rebuilds them. A clean stop empties the file\n"
    "  --no-rt-throttle         lift the kernel's RT throttling while running. Linux lets\n"
    "                           SCHED_FIFO threads run only kernel.sched_rt_runtime_us of\n"
    "                           every sched_rt_period_us (950000 of 1000000 by default),\n"
    "                           so an attached chain loses ~5% of its core in 50 ms gaps.\n"
    "                           With the flag sched_rt_runtime_us is set to -1 (host-wide)\n"
    "                           at start and the old value written back at exit (SIGINT,\n"
    "                           SIGTERM, failed start), but not after SIGKILL or a crash:\n"
    "                           then run sysctl -w kernel.sched_rt_runtime_us=950000.\n"
    "                           From Linux 6.12 the fair server still gives CFS threads\n"
    "                           of a managed core ~5%; before, they may starve. With\n"
    "                           several daemons on a host, the first to exit restores it.\n"
    "                           Without the flag a throttled host gets a warning at start.\n"
    "                           Under Kubernetes on cgroup v1 the flag is needed: a Pod's\n"
    "                           cgroups have cpu.rt_runtime_us 0, and the kernel refuses\n"
    "                           SCHED_FIFO to their threads only while throttling is on\n"
    "  -h, --help               this text\n"
    "\n"
    "Life of an sgroup (service keel.v1.Coopsched, proto/keel/v1/coopsched.proto):\n"
    "  RegisterGroup / RegisterThread  SIGSTOP the threads, pin them to a managed core,\n"
    "                                  at the wait priority (SCHED_OTHER): detached\n"
    "  Attach(core)     run priority, then SIGCONT, in chain order: attached\n"
    "  Detach           detach_req, wait for position 0 to park at a batch boundary,\n"
    "                   SIGSTOP, wait priority: detached (no CPU used)\n"
    "  Unregister       original policy and affinity back, SIGCONT\n"
    "  SetBatch, Status, Events (watchdog demotions and cut-offs, forced stops,\n"
    "                   exited threads, finished chains)\n"
    "\n"
    "The watchdog believes the kernel, not the chain's shared page (which every NF\n"
    "can write): each millisecond it reads every attached thread's schedstat, and\n"
    "its /proc wchan and stat when needed. While a thread of the core waits on the\n"
    "run queue at the run priority and is never switched in, every other thread of\n"
    "the core runs at most one stretch without yielding (SCHED_FIFO); one whose\n"
    "stretch reaches the yield timeout is demoted to SCHED_OTHER on its original\n"
    "cores at once and an event is recorded. Its sgroup is cut off (stopped, only\n"
    "Unregister accepted) unless one of its threads exits with 0 within 200 ms: a\n"
    "chain closing on purpose may hold the core while it frees its memory. A thread\n"
    "that exits is noticed at once through its pidfd: if its process exited with 0\n"
    "the others have 1 s to do the same and the sgroup is finished; otherwise (killed,\n"
    "non-zero, or the others do not follow) the other threads are stopped and get\n"
    "their original policy back, the sgroup is failed (only Unregister is accepted\n"
    "then) and an event is recorded. Signals go through pidfds, so a recycled pid\n"
    "is never stopped or made SCHED_FIFO. Events reach stderr through a thread\n"
    "under CFS: no enforcer waits on I/O. SIGINT/SIGTERM unregister every sgroup\n"
    "and exit. Exit code 2: bad arguments or a failed start.\n";

// Returns true if addr is unix: and an absolute path.
bool UnixPath(const std::string& addr) {
  return addr.rfind("unix:", 0) == 0 && addr.size() > 5 && addr[5] == '/';
}

// The default NF socket beside the admin socket: /run/keel/coopsched.sock gives
// /run/keel/coopsched-nf.sock; a path without .sock gets -nf appended.
std::string NfSocketOf(const std::string& admin) {
  const std::string ext = ".sock";
  size_t slash = admin.rfind('/');
  if (admin.size() > ext.size() && admin.compare(admin.size() - ext.size(), ext.size(), ext) == 0 &&
      admin.size() - ext.size() > slash + 1)
    return admin.substr(0, admin.size() - ext.size()) + "-nf" + ext;
  return admin + "-nf";
}

bool ParseU64(const char* s, uint64_t* out) {
  char* end;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || end == s || *end) return false;
  *out = v;
  return true;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "keel-coopsched: %s\n", msg.c_str());
  return 2;
}

// Creates the parent directory of path (mode 0755) if it is missing.
bool MakeParent(const std::string& path) {
  std::string dir = path.substr(0, path.rfind('/'));
  if (dir.empty()) return true;
  for (size_t pos = 1; pos <= dir.size(); pos++) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0755) < 0 && errno != EEXIST) return false;
  }
  return true;
}

// Says once, at start, that the kernel throttles the attached chains.
void WarnIfRtThrottled(const cs_options& opt) {
  int64_t us;
  cs_error err{};
  if (opt.no_rt_throttle || cs_rt_runtime_read(&us, &err) != CS_OK || us == -1) return;
  std::fprintf(stderr,
               "keel-coopsched: warning: kernel.sched_rt_runtime_us is %lld: SCHED_FIFO is "
               "throttled and attached chains lose part of each managed core; "
               "--no-rt-throttle lifts it while keel-coopsched runs\n",
               static_cast<long long>(us));
}

}  // namespace

int main(int argc, char** argv) {
  cs_options opt;
  cs_options_default(&opt);
  std::string listen = "unix:/run/keel/coopsched.sock", nf_listen;
  std::string pktbuf_dir = "/run/keel/pktbuf";
  std::string state_file;  // default: <lock-dir>/coopsched.state
  bool have_cores = false, pktbuf_in_pods = false;
  static const option kLong[] = {
      {"cores", required_argument, nullptr, 'c'},
      {"listen", required_argument, nullptr, 'l'},
      {"nf-listen", required_argument, nullptr, 'N'},
      {"pktbuf-dir", required_argument, nullptr, 'P'},
      {"pktbuf-in-pods", no_argument, nullptr, 'K'},
      {"yield-timeout-us", required_argument, nullptr, 'y'},
      {"detach-timeout-us", required_argument, nullptr, 'd'},
      {"run-priority", required_argument, nullptr, 'r'},
      {"wait-priority", required_argument, nullptr, 'w'},
      {"no-handoff-probe", no_argument, nullptr, 'n'},
      {"lock-dir", required_argument, nullptr, 'L'},
      {"no-rt-throttle", no_argument, nullptr, 'R'},
      {"state-file", required_argument, nullptr, 'S'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  int c;
  uint64_t v;
  cs_error err{};
  while ((c = getopt_long(argc, argv, "h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'c':
        if (cs_options_parse_cores(&opt, optarg, &err) != CS_OK) return Fail(err.msg);
        have_cores = true;
        break;
      case 'l': listen = optarg; break;
      case 'N': nf_listen = optarg; break;
      case 'P': pktbuf_dir = optarg; break;
      case 'K': pktbuf_in_pods = true; break;
      case 'y':
        if (!ParseU64(optarg, &opt.yield_timeout_us)) return Fail("bad --yield-timeout-us");
        break;
      case 'd':
        if (!ParseU64(optarg, &opt.detach_timeout_us)) return Fail("bad --detach-timeout-us");
        break;
      case 'r':
        if (!ParseU64(optarg, &v) || v > 99) return Fail("bad --run-priority");
        opt.run_priority = static_cast<int>(v);
        break;
      case 'w':
        if (!ParseU64(optarg, &v) || v > 99) return Fail("bad --wait-priority");
        opt.wait_priority = static_cast<int>(v);
        break;
      case 'n': opt.probe_handoff = 0; break;
      case 'L':
        if (!optarg[0] || std::strlen(optarg) >= sizeof opt.lock_dir) return Fail("bad --lock-dir");
        std::snprintf(opt.lock_dir, sizeof opt.lock_dir, "%s", optarg);
        break;
      case 'R': opt.no_rt_throttle = 1; break;
      case 'S':
        if (!optarg[0]) return Fail("bad --state-file (a path, or none)");
        state_file = optarg;
        break;
      case 'h': std::fputs(kUsage, stdout); return 0;
      default: std::fputs(kUsage, stderr); return 2;
    }
  }
  if (optind != argc) return Fail("unexpected argument " + std::string(argv[optind]));
  if (!have_cores) return Fail("--cores is required (see --help)");
  if (!UnixPath(listen)) return Fail("--listen must be unix:/absolute/path");
  const std::string sock = listen.substr(5);
  if (nf_listen.empty()) nf_listen = "unix:" + NfSocketOf(sock);
  if (!UnixPath(nf_listen)) return Fail("--nf-listen must be unix:/absolute/path");
  const std::string nf_sock = nf_listen.substr(5);
  if (nf_sock == sock) return Fail("--nf-listen must not be the admin socket, --listen");
  while (pktbuf_dir.size() > 1 && pktbuf_dir.back() == '/') pktbuf_dir.pop_back();
  if (pktbuf_dir.size() < 2 || pktbuf_dir[0] != '/' || pktbuf_dir.find("/../") != std::string::npos ||
      pktbuf_dir.find("/./") != std::string::npos)
    return Fail("--pktbuf-dir must be an absolute directory other than /");
  if (state_file.empty()) state_file = std::string(opt.lock_dir) + "/coopsched.state";
  if (state_file != "none") {
    if (state_file[0] != '/' || state_file.size() + 5 >= sizeof opt.state_file)
      return Fail("--state-file must be an absolute path (or none)");
    std::snprintf(opt.state_file, sizeof opt.state_file, "%s", state_file.c_str());
  }

  // Signals are taken by sigwait below; every thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  cs_sched* sched = cs_sched_create(&opt, &err);
  if (!sched) return Fail(err.msg);
  WarnIfRtThrottled(opt);
  // Chains a predecessor that died left running (cs-state.h), before anyone may call.
  uint32_t adopted = 0, dropped = 0;
  if (cs_sched_adopt(sched, &adopted, &dropped, &err) != CS_OK)
    std::fprintf(stderr, "keel-coopsched: warning: no sgroup taken back: %s\n", err.msg);
  else if (adopted || dropped)
    std::fprintf(stderr, "keel-coopsched: took back %u sgroup(s) from %s; %u could not be (see the "
                 "\"not-adopted\" events)\n", adopted, opt.state_file, dropped);

  for (const std::string& path : {sock, nf_sock}) {
    if (!MakeParent(path)) {
      cs_sched_destroy(sched);
      return Fail("cannot create the directory of " + path + ": " + std::strerror(errno));
    }
  }
  struct stat st;
  if (lstat(sock.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(sock.c_str());
  mode_t old_umask = umask(0077);
  keel::coopsched::Service service(sched);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  umask(old_umask);
  if (!server) {
    cs_sched_destroy(sched);
    return Fail("cannot listen on " + listen);
  }
  chmod(sock.c_str(), 0600);

  // The NF socket: a gRPC server without ports of its own, fed the connections that
  // nf_socket accepts (and knows the caller of).
  keel::coopsched::PeerTable peers;
  const cs_caller_policy policy{"/proc", pktbuf_dir.c_str(), pktbuf_in_pods ? 1 : 0,
                                cs_pidns_self()};
  keel::coopsched::NfService nf_service(sched, policy, &peers, listen);
  grpc::ServerBuilder nf_builder;
  nf_builder.RegisterService(&nf_service);
  std::unique_ptr<grpc::Server> nf_server = nf_builder.BuildAndStart();
  keel::coopsched::NfSocket nf_socket;
  std::string why;
  if (!nf_server || !nf_socket.Listen(nf_sock, &why)) {
    server->Shutdown();
    if (nf_server) nf_server->Shutdown();
    cs_sched_destroy(sched);
    unlink(sock.c_str());
    return Fail("cannot listen on " + nf_listen + ": " + why);
  }
  nf_socket.Serve(nf_server.get(), &peers, sched);

  std::string cores;
  for (int i = 0; i < opt.ncores; i++) cores += (i ? "," : "") + std::to_string(opt.cores[i]);
  std::fprintf(stderr,
               "keel-coopsched: managing cores %s; tsc %llu Hz; handoff %llu cycles; "
               "yield timeout %llu us; listening on %s (admin) and %s (NFs; pktbuf-dir %s%s)\n",
               cores.c_str(), static_cast<unsigned long long>(cs_sched_tsc_hz(sched)),
               static_cast<unsigned long long>(cs_sched_handoff_cycles(sched)),
               static_cast<unsigned long long>(opt.yield_timeout_us), listen.c_str(),
               nf_listen.c_str(), pktbuf_dir.c_str(), pktbuf_in_pods ? ", in pods" : "");

  int sig = 0;
  sigwait(&sigs, &sig);
  std::fprintf(stderr, "keel-coopsched: signal %d, giving every sgroup back\n", sig);
  service.Stop();
  nf_socket.Stop();
  nf_server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  nf_server->Wait();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  server->Wait();
  cs_sched_destroy(sched);
  unlink(sock.c_str());
  return 0;
}
