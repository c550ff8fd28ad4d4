/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RDMA verbs transport: a NIC port's health.  Link errors counted on the
 * lcore pause the port for a backoff; the device's asynchronous events,
 * read on the control thread, pause and resume its ports.  Below
 * rdma_conn.c and rdma_xfer.c, which report here and call nothing back.
 */
#include <rte_common.h>
#include <rte_cycles.h>

#include "rdma.h"

void
rd_port_error(struct rd_port *rp)
{
	uint64_t now = rte_get_tsc_cycles(), hz = rte_get_tsc_hz();
	unsigned int i;

	if (now - rp->err_window > hz) {
		rp->err_window = now;
		rp->errors = 0;
	}
	if (++rp->errors < RD_PAUSE_ERRORS ||
	    __atomic_load_n(&rp->paused, __ATOMIC_ACQUIRE))
		return;
	RD_LOG(WARNING, "%s: %u link errors within a second: paused for %u ms",
	       rp->nic.name, rp->errors, rp->backoff_ms);
	__atomic_store_n(&rp->resume_us, kvt_now_us() + rp->backoff_ms * 1000ull,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&rp->paused, 1, __ATOMIC_RELEASE);
	rp->backoff_ms = RTE_MIN(rp->backoff_ms * 2, (uint32_t)RD_BACKOFF_MAX_MS);
	for (i = 0; i < rp->nslots; i++)
		if (rp->slot[i] != NULL)
			kvt_conn_set_down(&rp->slot[i]->c, 1);
}

static struct rd_port *
dev_port(struct rd_dev *dev, int num)
{
	unsigned int i;

	for (i = 0; i < dev->nports; i++)
		if (dev->port[i]->nic.port == num)
			return dev->port[i];
	return NULL;
}

/* Events are per device: the device's first port reads them for all. */
void
rd_async_events(struct rd_port *self)
{
	struct ibv_async_event ev;
	struct rd_port *rp;
	unsigned int i;

	if (self->dev->port[0] != self)
		return;
	while (rd_ibv.get_async_event(self->dev->ctx, &ev) == 0) {
		rp = ev.event_type == IBV_EVENT_PORT_ERR ||
			ev.event_type == IBV_EVENT_PORT_ACTIVE ?
			dev_port(self->dev, ev.element.port_num) : self;
		switch (rp != NULL ? ev.event_type : IBV_EVENT_SM_CHANGE) {
		case IBV_EVENT_PORT_ERR:
			RD_LOG(WARNING, "%s port %u went down", rp->nic.name,
			       rp->nic.port);
			__atomic_store_n(&rp->resume_us, kvt_now_us() +
					 rp->backoff_ms * 1000ull, __ATOMIC_RELEASE);
			__atomic_store_n(&rp->paused, 1, __ATOMIC_RELEASE);
			break;
		case IBV_EVENT_PORT_ACTIVE:
			RD_LOG(NOTICE, "%s port %u is active again", rp->nic.name,
			       rp->nic.port);
			__atomic_store_n(&rp->resume_us, kvt_now_us(),
					 __ATOMIC_RELEASE);
			break;
		case IBV_EVENT_DEVICE_FATAL:
			RD_LOG(ERR, "%s: fatal device error", self->dev->name);
			for (i = 0; i < self->dev->nports; i++) {
				rp = self->dev->port[i];
				__atomic_store_n(&rp->resume_us, kvt_now_us() +
						 RD_BACKOFF_MAX_MS * 1000ull,
						 __ATOMIC_RELEASE);
				__atomic_store_n(&rp->paused, 1, __ATOMIC_RELEASE);
			}
			break;
		default:
			RD_LOG(DEBUG, "%s: async event %s", self->dev->name,
			       rd_ibv.event_type_str(ev.event_type));
			break;
		}
		rd_ibv.ack_async_event(&ev);
	}
}
