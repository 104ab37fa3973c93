// The one logger: every process's diagnostics go through it, one line each, in one format:
//
//   I 18:25:01.123 learner 0] learner: final checkpoint at version 4812 written to runs/x
//
// level (D, I, W, E), local time to the millisecond, the process's role, then the message.
// Each line is one write(2), so lines from several threads never interleave. Lines below
// the level STAMPEDE_LOG_LEVEL names (debug, info, warning, error; default info) are
// dropped. printf-style: the compiler checks each format against its arguments.
#pragma once

#include <string>

namespace stampede::base {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Who this process is, for the prefix: "stampede" (the command and the coordinator) until
// a role sets itself ("learner 0", "actor 3", "ps 1", "evaluator 0").
void SetLogRole(const std::string& role);
// The lowest level written (STAMPEDE_LOG_LEVEL sets it at the first line).
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

// One line (a trailing newline in the format is not doubled; inner newlines stay).
void LogDebug(const char* format, ...) __attribute__((format(printf, 1, 2)));
void LogInfo(const char* format, ...) __attribute__((format(printf, 1, 2)));
void LogWarning(const char* format, ...) __attribute__((format(printf, 1, 2)));
void LogError(const char* format, ...) __attribute__((format(printf, 1, 2)));

// The line the Log functions write (no trailing newline), for tests.
std::string FormatLogLine(LogLevel level, const std::string& role, const std::string& message, double unix_seconds);

}  // namespace stampede::base
