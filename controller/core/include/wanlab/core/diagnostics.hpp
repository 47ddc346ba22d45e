#pragma once
// Config errors: every problem found in a file, each naming the file, the JSON path and
// the reason, reported together rather than one at a time.
#include <stdexcept>
#include <string>
#include <vector>

namespace wanlab::core {

struct Diagnostic {
  std::string file;    // as given by the user, e.g. "topologies/two-dc.json"
  std::string path;    // JSON pointer, e.g. "/wan/2/rate"; "" for the whole document
  std::string reason;  // e.g. "'-4Gbit': must not be negative"
  std::string to_string() const;  // "topologies/two-dc.json: /wan/2/rate: '-4Gbit': must not be negative"
};

/// Collects diagnostics while a document is checked.
class Diagnostics {
 public:
  explicit Diagnostics(std::string file) : file_(std::move(file)) {}
  void add(std::string path, std::string reason) { items_.push_back({file_, std::move(path), std::move(reason)}); }
  bool empty() const { return items_.empty(); }
  const std::vector<Diagnostic>& items() const { return items_; }
  const std::string& file() const { return file_; }
  /// Throws ConfigError if anything was collected.
  void throw_if_any() const;

 private:
  std::string file_;
  std::vector<Diagnostic> items_;
};

class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::vector<Diagnostic> diagnostics);
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

}  // namespace wanlab::core
