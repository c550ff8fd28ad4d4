/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Read sections for data that application threads read on submit while a
 * rare writer replaces it (the region registry, a peer's imported regions,
 * overlap claims).
 *
 * Written here because DPDK's rte_rcu_qsbr needs every reader thread to
 * register and report quiescent states; kvt's readers are whatever threads
 * the application has.  Scheme: two reader counters and a phase bit.  A
 * reader increments the counter of the current phase, reads, decrements.
 * A writer, after publishing the new version, flips the phase and waits
 * for the old phase's counter to drain, twice, so a reader that sampled
 * the phase just before a flip is covered by the second wait.  Readers
 * never wait and make no system call; writers are control-path code and
 * may sleep.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#include <rte_pause.h>

#include "kvt_private.h"

static struct {
	uint32_t phase;
	uint64_t readers[2] __rte_cache_aligned;
	pthread_mutex_t sync_lock;
} kvt_rcu = { .sync_lock = PTHREAD_MUTEX_INITIALIZER };

unsigned int
kvt_rcu_read_lock(void)
{
	unsigned int ph = __atomic_load_n(&kvt_rcu.phase, __ATOMIC_SEQ_CST) & 1;

	__atomic_fetch_add(&kvt_rcu.readers[ph], 1, __ATOMIC_SEQ_CST);
	return ph;
}

void
kvt_rcu_read_unlock(unsigned int token)
{
	__atomic_fetch_sub(&kvt_rcu.readers[token], 1, __ATOMIC_RELEASE);
}

static void
flip_and_drain(void)
{
	unsigned int old = __atomic_fetch_xor(&kvt_rcu.phase, 1,
					      __ATOMIC_SEQ_CST) & 1;
	unsigned int spins = 0;

	while (__atomic_load_n(&kvt_rcu.readers[old], __ATOMIC_SEQ_CST) != 0) {
		if (++spins < 1024)
			rte_pause();
		else
			sched_yield();
	}
}

void
kvt_rcu_synchronize(void)
{
	pthread_mutex_lock(&kvt_rcu.sync_lock);
	flip_and_drain();
	flip_and_drain();
	pthread_mutex_unlock(&kvt_rcu.sync_lock);
}
