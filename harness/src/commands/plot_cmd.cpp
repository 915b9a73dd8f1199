// `crossmod plot [DIRS...]`: regenerates the plots of results folders by running the
// analysis package (`CROSSMOD_PYTHON -m analysis DIRS...`) with PYTHONPATH pointing at the
// source tree, so it works from any working directory. The Python exit code is ours:
// 0 done (missing inputs only skip plots), 2 a malformed input file. Main thread only.
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands/commands.hpp"

extern char** environ;

namespace crossmod::harness {
namespace {

namespace fs = std::filesystem;

struct PlotOptions {
  std::vector<std::string> dirs;
  std::string out;
  std::string only;
  bool no_svg = false;
  bool all_sweeps = false;
};

// With no folders named, every results/<machine>/ folder of the source tree.
std::vector<std::string> default_dirs() {
  const fs::path results = fs::path(CROSSMOD_SOURCE_DIR) / "results";
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(results, ec)) {
    if (entry.is_directory(ec) && entry.path().filename() != "plots") {
      dirs.push_back(entry.path().string());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) {
    throw UsageError(fmt::format("no results folders under {}; name one: crossmod plot "
                                 "results/<machine>",
                                 results.string()));
  }
  return dirs;
}

// The environment of the child: ours, with the source tree first on PYTHONPATH and the
// non-interactive matplotlib backend.
std::vector<std::string> child_environment() {
  std::vector<std::string> env;
  std::string pythonpath = std::string("PYTHONPATH=") + CROSSMOD_SOURCE_DIR;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("PYTHONPATH=", 0) == 0) {
      const std::string old = entry.substr(std::strlen("PYTHONPATH="));
      if (!old.empty()) pythonpath += ":" + old;
    } else if (entry.rfind("MPLBACKEND=", 0) != 0) {
      env.push_back(entry);
    }
  }
  env.push_back(pythonpath);
  env.push_back("MPLBACKEND=Agg");
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int run_plot(const PlotOptions& opt) {
  const fs::path package = fs::path(CROSSMOD_SOURCE_DIR) / "analysis" / "__main__.py";
  if (!fs::exists(package)) {
    throw UsageError(fmt::format("analysis package not found at {}", package.string()));
  }
  // -P: do not put the working directory first on sys.path, so a folder named `analysis`
  // where the user stands cannot shadow the package (Python >= 3.11, which tomllib needs).
  std::vector<std::string> args = {CROSSMOD_PYTHON, "-P", "-m", "analysis"};
  const auto dirs = opt.dirs.empty() ? default_dirs() : opt.dirs;
  args.insert(args.end(), dirs.begin(), dirs.end());
  if (!opt.out.empty()) {
    args.push_back("--out");
    args.push_back(opt.out);
  }
  if (!opt.only.empty()) {
    args.push_back("--only");
    args.push_back(opt.only);
  }
  if (opt.no_svg) args.push_back("--no-svg");
  if (opt.all_sweeps) args.push_back("--all-sweeps");

  auto env = child_environment();
  auto argv = c_strings(args);
  auto envp = c_strings(env);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0].c_str(), nullptr, nullptr, argv.data(), envp.data());
  if (rc != 0) {
    fmt::print(stderr,
               "crossmod: error: cannot run {}: {}\n  (configure with "
               "-DCROSSMOD_PYTHON=<python3 with matplotlib and numpy>)\n",
               args[0], std::strerror(rc));
    return 3;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      fmt::print(stderr, "crossmod: error: waitpid: {}\n", std::strerror(errno));
      return 3;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    fmt::print(stderr, "crossmod: error: {} -m analysis killed by signal {}\n", args[0],
               WTERMSIG(status));
  }
  return 3;
}

}  // namespace

void register_plot(CLI::App& app) {
  auto opt = std::make_shared<PlotOptions>();
  auto* cmd = app.add_subcommand(
      "plot",
      "Regenerate plots of results/<machine> folders (default: all) into <folder>/plots; "
      "several folders also get a Tmax overlay");
  cmd->add_option("dirs", opt->dirs, "results/<machine> folders");
  cmd->add_option("--out", opt->out,
                  "output directory instead of <folder>/plots (several folders: OUT/<name>, "
                  "overlay in OUT)");
  cmd->add_option("--only", opt->only,
                  "comma list of plots to draw (e.g. failure_rate,controls; see python3 -m "
                  "analysis --help)");
  cmd->add_flag("--no-svg", opt->no_svg, "write PNG only");
  cmd->add_flag("--all-sweeps", opt->all_sweeps,
                "pool every sweep-*.csv of a folder instead of the newest");
  cmd->callback([opt] {
    std::fflush(stdout);
    exit_code() = run_plot(*opt);
  });
}

}  // namespace crossmod::harness
