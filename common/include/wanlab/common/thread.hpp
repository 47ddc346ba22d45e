#pragma once
// The calling thread's name (in ps, top, perf: at most 15 characters) and its nice value.
// Linux's nice is per thread, so this sets the caller's only.
#include <string>

namespace wanlab {

/// Names the calling thread (truncated to 15 characters).
void name_this_thread(const std::string& name);

/// Sets the calling thread's nice value (-20 .. 19). Returns an empty string, or why it could
/// not (raising priority needs CAP_SYS_NICE).
std::string set_this_thread_nice(int nice);

}  // namespace wanlab
