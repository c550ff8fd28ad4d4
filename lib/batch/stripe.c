/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Striping: which eligible port takes the next slice.  Each port keeps the
 * bytes it has in flight and a recent rate; a slice goes where it would
 * finish first ((in flight + slice) / rate), the rate measured while the
 * port had a backlog (its capacity), and no port takes much more than it
 * finishes in 10 ms, or in two of its rate windows where those are
 * longer (port_cap).  A port whose rate is not
 * known yet counts as the fastest, and every 64th slice goes round-robin,
 * so a port that fell out of favour is still probed and its rate stays
 * current.
 */
#include <rte_cycles.h>
#include <rte_lcore.h>

#include "kvt_private.h"

#define KVT_PROBE_EVERY 64
#define KVT_RATE_WINDOW_US 1000
#define KVT_BACKLOG_SLICES 8
#define KVT_STRIPE_CAP (8u << 20)
#define KVT_STRIPE_HORIZON_US 10000

static unsigned int
nth_bit(uint32_t mask, unsigned int n)
{
	while (n-- > 0)
		mask &= mask - 1;
	return (unsigned int)__builtin_ctz(mask);
}

/*
 * Bytes a port may hold in flight before it gets no more: what it moves
 * in KVT_STRIPE_HORIZON_US at its measured rate, or in two of its recent
 * rate windows where they are longer, at least two slices
 * (so a slow port still has a backlog to measure its rate by), at most
 * the PMD's cap: the link does not idle between the
 * submitter's polls, yet no port holds much more than a moment's work.
 * The horizon is long next to a poll interval, so a port whose rate was
 * measured low in a hiccup is still given enough to show its real rate.  A cap in bytes
 * alone let a 10x slower rail hold as many bytes as a fast one: the fast
 * rails went idle while every batch waited on the slow rail's queue
 * (two fast rails plus one slow took 1.4x the time of the two alone).
 * Slices held back go to whichever port drains first, so the split
 * follows what the links really do.
 *
 * A window is 1 ms when completions flow, but on a loaded host they come
 * in bursts as far apart as the lcore or the peer is kept off its cpu
 * (10-80 ms under ThreadSanitizer beside busy loops).  A port holding
 * less than such a gap's work sits idle in it and its rate is measured
 * below what it can do; that shrank its cap again, and one of two equal
 * links fell to 17 % of the bytes within a second.  Two gaps' work keeps
 * it busy across them.
 */
static uint64_t
port_cap(const struct kvt_port *p)
{
	uint64_t max = p->pmd->ops->stripe_cap != 0 ? p->pmd->ops->stripe_cap :
		KVT_STRIPE_CAP;
	uint64_t rate = __atomic_load_n(&p->rate_bpus, __ATOMIC_RELAXED);
	uint64_t gap = __atomic_load_n(&p->rate_gap_us, __ATOMIC_RELAXED);

	if (rate == 0)
		return max;	/* not measured yet: probe it */
	return RTE_MIN(max, RTE_MAX(rate * RTE_MAX((uint64_t)KVT_STRIPE_HORIZON_US,
						   2 * gap),
				    2 * (uint64_t)kvt_eng->o.slice));
}

uint32_t
kvt_stripe_space(uint32_t mask)
{
	const struct kvt_port *p;
	uint32_t m, space = 0;

	for (m = mask; m != 0; m &= m - 1) {
		p = kvt_eng->ports[__builtin_ctz(m)];
		if (__atomic_load_n(&p->inflight_bytes, __ATOMIC_RELAXED) < port_cap(p))
			space |= m & -m;
	}
	return space;
}

unsigned int
kvt_stripe_pick(uint32_t mask, uint32_t len, uint64_t seq)
{
	uint64_t best_cost = UINT64_MAX, cost, fastest = 1, rate;
	unsigned int i, best = 0;
	struct kvt_port *p;
	uint32_t m;

	if ((mask & (mask - 1)) == 0) {
		best = (unsigned int)__builtin_ctz(mask);
	} else if (seq % KVT_PROBE_EVERY == KVT_PROBE_EVERY - 1) {
		best = nth_bit(mask, (unsigned int)((seq / KVT_PROBE_EVERY) %
				(unsigned int)__builtin_popcount(mask)));
	} else {
		for (m = mask; m != 0; m &= m - 1) {
			p = kvt_eng->ports[__builtin_ctz(m)];
			rate = __atomic_load_n(&p->rate_bpus, __ATOMIC_RELAXED);
			fastest = RTE_MAX(fastest, rate);
		}
		for (m = mask; m != 0; m &= m - 1) {
			i = (unsigned int)__builtin_ctz(m);
			p = kvt_eng->ports[i];
			rate = __atomic_load_n(&p->rate_bpus, __ATOMIC_RELAXED);
			cost = (__atomic_load_n(&p->inflight_bytes,
						__ATOMIC_RELAXED) + len) * 64 /
				(rate != 0 ? rate : fastest);
			if (cost < best_cost) {
				best_cost = cost;
				best = i;
			}
		}
	}
	p = kvt_eng->ports[best];
	/* An idle port's rate window starts now: the time it sat idle is
	 * not slowness (account()). */
	if (__atomic_fetch_add(&p->inflight_bytes, len, __ATOMIC_RELAXED) == 0)
		__atomic_store_n(&p->busy_since, rte_get_tsc_cycles(),
				 __ATOMIC_RELAXED);
	return best;
}

uint64_t
kvt_stripe_drain_us(uint32_t mask)
{
	uint64_t us = UINT64_MAX, rate;
	const struct kvt_port *p;
	uint32_t m;

	if (mask == 0 || kvt_stripe_space(mask) != 0)
		return 0;	/* a port takes more now */
	for (m = mask; m != 0; m &= m - 1) {
		p = kvt_eng->ports[__builtin_ctz(m)];
		rate = __atomic_load_n(&p->rate_bpus, __ATOMIC_RELAXED);
		if (rate == 0)
			return 0;	/* not measured: full at max cap */
		us = RTE_MIN(us, __atomic_load_n(&p->inflight_bytes,
						 __ATOMIC_RELAXED) / rate);
	}
	return us;
}

/* Has p more work queued than it finishes in a moment (a few slices, or
 * half of what its cap lets it hold, for a port too slow to hold a few:
 * its rate could never be measured down otherwise)? */
static int
backlogged(const struct kvt_port *p)
{
	uint64_t q = __atomic_load_n(&p->inflight_bytes, __ATOMIC_RELAXED);

	if (rte_lcore_id() == p->lcore)
		q -= RTE_MIN(q, p->done_bytes);
	return q >= RTE_MIN((uint64_t)KVT_BACKLOG_SLICES * kvt_eng->o.slice,
			    port_cap(p) / 2);
}

/* Slices of len bytes (held of them striped) left p at TSC time now;
 * local: on p's lcore. */
static void
account(struct kvt_port *p, uint32_t len, uint32_t held, uint64_t now,
	int local)
{
	static uint64_t win;	/* window length in TSC cycles */
	uint64_t el, rate, since, us;
	int busy;

	if (win == 0)
		win = rte_get_tsc_hz() / 1000000 * KVT_RATE_WINDOW_US;
	/* Submitters add to inflight_bytes on another cpu: the port's own
	 * lcore takes its settled bytes off once a loop, not per slice. */
	if (local)
		p->done_bytes += held;
	else if (held != 0)
		__atomic_fetch_sub(&p->inflight_bytes, held, __ATOMIC_RELAXED);
	since = __atomic_load_n(&p->busy_since, __ATOMIC_RELAXED);
	if (since > p->rate_win_start && since < now) {
		/* It sat idle before: the window starts when work came. */
		p->rate_win_start = since;
		p->rate_win_bytes = 0;
	}
	el = now - p->rate_win_start;
	if (p->rate_win_start == 0 || el > 100 * win) {
		/* First slice, or the port sat idle: idle time is not slowness. */
		p->rate_win_start = now;
		p->rate_win_bytes = len;
		return;
	}
	p->rate_win_bytes += len;
	if (el < win)
		return;
	/* Bytes per microsecond over the window (win cycles = 1 ms). */
	us = el * KVT_RATE_WINDOW_US / win;
	rate = p->rate_win_bytes / RTE_MAX(us, (uint64_t)1);
	busy = backlogged(p);
	/* How long a busy port's windows last: completions may come in
	 * bursts far apart (an idle one's are long for want of work). */
	if (busy)
		__atomic_store_n(&p->rate_gap_us, p->rate_gap_us != 0 ?
				 (p->rate_gap_us * 3 + us) / 4 : us,
				 __ATOMIC_RELAXED);
	/*
	 * What a port finished is its capacity only while it had work
	 * waiting: a port given few slices finishes few, and taking that
	 * as its rate would give it fewer still (equal links then settled
	 * at any split, 93/7 as well as 50/50).  A window without a backlog
	 * may raise the estimate, never lower it.
	 */
	if (p->rate_bpus != 0 && rate < p->rate_bpus && !busy) {
		p->rate_win_bytes = 0;
		p->rate_win_start = now;
		return;
	}
	/* Weigh the new window 1/4 so one hiccup does not starve a rail. */
	rate = p->rate_bpus != 0 ? (p->rate_bpus * 3 + rate) / 4 : rate;
	__atomic_store_n(&p->rate_bpus, RTE_MAX(rate, (uint64_t)1),
			 __ATOMIC_RELAXED);
	p->rate_win_bytes = 0;
	p->rate_win_start = now;
}

void
kvt_stripe_account(struct kvt_port *p, uint32_t len, uint32_t held,
		   uint64_t now)
{
	account(p, len, held, now, rte_lcore_id() == p->lcore);
}

void
kvt_stripe_account_local(struct kvt_port *p, uint32_t len, uint32_t held,
			 uint64_t now)
{
	account(p, len, held, now, 1);
}
