// Clang's thread-safety annotations behind macros (no-ops for other compilers). Every
// field a mutex guards says so (GUARDED_BY), every function that needs a lock held says
// so (REQUIRES); `tools/thread_safety.sh` compiles the tree with clang's
// -Wthread-safety -Werror, and CI runs it.
#pragma once

#if defined(__clang__)
#define STAMPEDE_TSA(x) __attribute__((x))
#else
#define STAMPEDE_TSA(x)
#endif

#define CAPABILITY(x) STAMPEDE_TSA(capability(x))
#define SCOPED_CAPABILITY STAMPEDE_TSA(scoped_lockable)
#define GUARDED_BY(x) STAMPEDE_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) STAMPEDE_TSA(pt_guarded_by(x))
#define REQUIRES(...) STAMPEDE_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) STAMPEDE_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) STAMPEDE_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) STAMPEDE_TSA(release_capability(__VA_ARGS__))
#define RETURN_CAPABILITY(x) STAMPEDE_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS STAMPEDE_TSA(no_thread_safety_analysis)
