// Transparent huge pages for the process's heap. Where the kernel gives them only to
// memory that asks (THP mode "madvise", the common default), glibc's malloc asks for
// every large block when the tunable glibc.malloc.hugetlb=1 is set; a tunable is read
// once, at start-up, so `stampede` sets it and re-executes itself before anything else
// runs. A learner streams a 38 MB input batch and its activations through every step
// and an actor switches cores with it: on 4 KB pages both miss the TLB far more often
// (the Pong fleet ran 5% faster with it, docs/benchmarks.md, "Where the last tenth goes").
#pragma once

#include <string>

namespace stampede::base {

// Returns at once if huge pages are on already, not asked for (STAMPEDE_HUGE_PAGES=0),
// not possible (THP "never", glibc before 2.35) or left to the user (GLIBC_TUNABLES
// names glibc.malloc.hugetlb); otherwise re-executes the binary with the tunable set
// and does not return (if the exec fails, it returns and the process runs without).
// Call first thing in main: the exec replaces the process, threads and all.
void ReexecWithHugePages(char** argv);

// One line for logs and the bench: the kernel's THP mode and whether this process's
// malloc asks for huge pages, e.g. "THP madvise, malloc asks (glibc.malloc.hugetlb=1)".
std::string HugePagesDescription();

}  // namespace stampede::base
