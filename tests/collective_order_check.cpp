// collective_order_check TP TRACE...: checks the collective traces of one job
// (STRATA_COLLECTIVE_TRACE, one file per rank named <prefix>.<rank>, lines of
// "<group label> <collective> <queue>") against the order rule of
// src/parallel/collective_order.h:
//   - every group (tp group r / TP, dp group r % TP) has all its members issue
//     the same sequence of collectives;
//   - the ranks' orders admit one global order: the graph whose nodes are the
//     groups' collectives and whose edges join each rank's consecutive issues
//     has no cycle, so on one queue per process no two collectives can wait
//     on each other;
//   - every device collective of the job is on the process's one queue.
// A rank may issue collectives of a group only it and its peers are in (the
// first dp rank's tp groups gather a checkpoint): that is fine as long as the
// above hold. Prints one line per problem and a summary; exit 1 on a problem,
// 2 on bad arguments or an unreadable trace.
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using Group = std::pair<std::string, int>;  // label, index
using Node = std::pair<Group, int>;         // the group's n-th collective

int group_index(const std::string& label, int rank, int tp) {
  return label == "tp" ? rank / tp : rank % tp;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: collective_order_check TP TRACE...\n");
    return 2;
  }
  const int tp = std::atoi(argv[1]);
  if (tp < 1) {
    std::fprintf(stderr, "collective_order_check: TP must be >= 1, got '%s'\n", argv[1]);
    return 2;
  }
  std::map<int, std::vector<std::vector<std::string>>> ranks;
  for (int i = 2; i < argc; ++i) {
    const std::string path = argv[i];
    const size_t dot = path.rfind('.');
    std::ifstream in(path);
    if (!in || dot == std::string::npos) {
      std::fprintf(stderr, "collective_order_check: cannot read %s\n", path.c_str());
      return 2;
    }
    auto& lines = ranks[std::atoi(path.c_str() + dot + 1)];
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::vector<std::string> w;
      for (std::string x; words >> x;) w.push_back(x);
      if (w.empty()) continue;
      if (w.size() != 3) {
        std::fprintf(stderr, "collective_order_check: %s: a line is not '<group> <op> <queue>'\n",
                     path.c_str());
        return 2;
      }
      lines.push_back(w);
    }
  }
  std::map<Group, std::map<int, std::vector<std::string>>> group_ops;
  std::map<Node, std::set<Node>> edges;
  std::set<Node> nodes;
  std::set<std::string> queues;
  size_t total = 0;
  for (const auto& [r, lines] : ranks) {
    std::map<Group, int> seen;
    const Node* prev = nullptr;
    Node prev_node;
    for (const auto& w : lines) {
      const Group g{w[0], group_index(w[0], r, tp)};
      group_ops[g][r].push_back(w[1]);
      const Node node{g, seen[g]++};
      nodes.insert(node);
      if (prev) edges[*prev].insert(node);
      prev_node = node;
      prev = &prev_node;
      if (w[2] != "host") queues.insert(w[2]);
      ++total;
    }
  }
  std::vector<std::string> bad;
  for (const auto& [g, by_rank] : group_ops) {
    std::set<std::vector<std::string>> seqs;
    for (const auto& [r, lines] : ranks)
      if (group_index(g.first, r, tp) == g.second) {
        const auto it = by_rank.find(r);
        seqs.insert(it == by_rank.end() ? std::vector<std::string>{} : it->second);
      }
    if (seqs.size() != 1)
      bad.push_back("group " + g.first + std::to_string(g.second) +
                    ": its members issue different sequences");
  }
  // Kahn's topological sort: every node is reached iff there is no cycle.
  std::map<Node, int> indegree;
  for (const auto& [from, to] : edges)
    for (const Node& n : to) ++indegree[n];
  std::vector<Node> ready;
  for (const Node& n : nodes)
    if (indegree[n] == 0) ready.push_back(n);
  size_t done = 0;
  while (!ready.empty()) {
    const Node n = ready.back();
    ready.pop_back();
    ++done;
    for (const Node& m : edges[n])
      if (--indegree[m] == 0) ready.push_back(m);
  }
  if (done != nodes.size())
    bad.push_back("the ranks' orders form a cycle (" + std::to_string(nodes.size() - done) +
                  " collectives on it)");
  if (queues.size() > 1) bad.push_back("device collectives on " + std::to_string(queues.size()) + " queues");
  for (const std::string& b : bad) std::printf("collective order: %s\n", b.c_str());
  std::printf("collective order: %zu collectives on %zu ranks, %zu groups, %zu device queue(s): %s\n",
              total, ranks.size(), group_ops.size(), queues.size(), bad.empty() ? "ok" : "FAIL");
  return bad.empty() ? 0 : 1;
}
