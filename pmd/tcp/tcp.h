/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tcp PMD internals, shared by its files:
 *   tcp.c         probe, port start and stop, memory and endpoints;
 *   tcp_conn.c    connections: choosing an endpoint, dialling, tokens,
 *                 redialling lost sockets (control path);
 *   tcp_poll.c    one turn over a port's sockets (urgent lanes first, a
 *                 byte budget for the rest) and the idle wait;
 *   tcp_recv.c    received bytes parsed as frames (both sides);
 *   tcp_retire.c  giving up a connection's sockets without letting
 *                 anything they carried land later: the target closes
 *                 them and issues a new token before their work moves;
 *   tcp_target.c  the target's side: checking and serving a peer's
 *                 frames, answering them, authenticating data sockets;
 *   tcp_sock.c    the lcore's sockets and lanes, sending frames, submit;
 *   tcp_wire.c    the frames' wire format.
 * Calls go down that list (tcp_recv.c and tcp_retire.c, tcp_target.c and
 * tcp_retire.c do not call each other), never up; test 'layers' checks.
 */
#ifndef KVT_PMD_TCP_H
#define KVT_PMD_TCP_H

#include <errno.h>
#include <pthread.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_kvargs.h>

#include "kvt_pmd_kit.h"
#include "tcp_wire.h"

extern int tcp_logtype;
#define TCP_LOG(level, fmt, ...)					\
	rte_log(RTE_LOG_ ## level, tcp_logtype, "kvt.tcp: " fmt "\n",	\
		##__VA_ARGS__)


#define TCP_MAX_PORTS 16
#define TCP_MAX_SOCKS 4096
#define TCP_CONN_SOCKS 9	/* per connection: conns=8 data, 1 urgent */
#define TCP_RESP_RING 256
#define TCP_MAX_INFLIGHT (16u << 20)	/* bytes sent, not acked, per socket */
#define TCP_CHUNK (1u << 20)	/* payload bytes per recv/send call */
/*
 * While urgent frames moved on a port in the last TCP_HOT_US, a data
 * socket moves slice_kb (TCP_SLICE_KB) each way before the lcore looks at
 * the urgent lanes and its urgent ring again; on a port without urgent
 * traffic a share is TCP_CHUNK, fewer system calls for the same bytes.  A
 * turn takes at most TCP_TURN_SHARES shares over all the data sockets,
 * then the lcore goes round.
 */
#define TCP_SLICE_KB 64
#define TCP_HOT_US (100 * 1000)
#define TCP_TURN_SHARES 4
#define TCP_HELLO_US (5 * 1000 * 1000)
#define TCP_REDIAL_US (100 * 1000)	/* one dial attempt */
#define TCP_BACKOFF_MIN_MS 250u
#define TCP_BACKOFF_MAX_MS 10000u
/* The control thread waits this long at most for an lcore to take a
 * port call of the retire or redial paths; it tries again later rather
 * than stop answering pings. */
#define TCP_CALL_MS 100u


struct tcp_conn;

/* A response the target still owes on a socket. */
struct tcp_resp {
	struct tcp_hdr h;
	uint64_t src;		/* READ_DATA: our address */
	uint32_t off;		/* bytes of header + payload sent */
};

struct tcp_sock {
	int fd;
	int server;		/* accepted here */
	int authed;
	struct tcp_conn *conn;
	uint64_t since;		/* TSC: accept time, or last progress */
	uint64_t asked;		/* TSC: the kernel last asked if it stalls */
	/* initiator: to send, then waiting for their acks */
	struct kvt_desc *txq, *txq_tail;
	struct kvt_desc *wq, *wq_tail;
	uint32_t tx_off;
	uint64_t inflight;
	/* both: the frame being received */
	struct tcp_hdr rh;
	uint32_t rh_off;
	uint32_t rx_left;	/* payload bytes still to come */
	uint32_t rx_done;
	int32_t rx_status;	/* target: the frame's outcome so far */
	uint8_t small[KVT_NOTIFY_MAX];	/* NOTIFY payload */
	uint8_t rbuf[4096];	/* headers and small frames */
	uint32_t rb_off, rb_len;
	struct tcp_hello hello;
	uint32_t hello_off;
	int want_out;		/* EPOLLOUT is in its epoll interest */
	int urgent;		/* an urgent lane: in the port's uepfd */
	/* target: responses owed, in order */
	struct tcp_resp resp[TCP_RESP_RING];
	uint32_t resp_head, resp_tail;
	struct tcp_sock *next;
};

/* Initiator: where a connection stands in giving up its sockets. */
enum tcp_retire_state {
	TCP_R_NONE,		/* not giving up */
	TCP_R_HELD,		/* lcore: sockets closed, their work held */
	TCP_R_ASKED,		/* control: the target was asked to close them */
	TCP_R_ANSWERED,		/* control: it did; the work is released next */
};

struct tcp_conn {
	struct kvt_conn c;	/* first */
	uint8_t token[16];	/* what its sockets present in their hello */
	int server;		/* accepted here */
	struct tcp_ep ep;	/* initiator: where to dial */
	struct tcp_sock *socks[TCP_CONN_SOCKS];
	unsigned int nsocks;
	unsigned int rr;
	struct kvt_inbox *inbox;	/* acceptor: notifications to us */
	struct tcp_conn *next;	/* acceptor: the port's token list */
	uint8_t prev_token[16];	/* acceptor: the token retired last */
	/* Initiator, control thread: dialling lost sockets again. */
	struct tcp_conn *dnext;
	uint64_t redial_at_us;
	uint32_t backoff_ms;
	int dial_fd;		/* a dial in progress, or -1 */
	uint64_t dial_until_us;
	/*
	 * Initiator: giving up (tcp_retire.c).  The lcore moves the work of
	 * the sockets it gave up to held and the numbers of the tails among
	 * it to rseq, then publishes TCP_R_HELD; the control thread asks the
	 * target and, once answered, has the lcore release the work.
	 */
	uint32_t retire;	/* enum tcp_retire_state */
	int32_t giving_up;	/* lcore: the error, till the poll ends */
	struct tcp_conn *gnext;	/* lcore: the port's list of such */
	struct kvt_desc *held, *held_tail;	/* lcore */
	struct tcp_conn *rnext;	/* lcore: the port's list of such */
	uint32_t nrseq;
	uint32_t rseq[TCP_RETIRE_SEQS];
	uint64_t asked_us;	/* control: when the target was asked */
	uint8_t next_token[16];	/* control: the target's answer */
	uint64_t taken;		/* control: bit i: rseq[i] acted there */
};

struct tcp_port {
	char ifname[IF_NAMESIZE];
	struct sockaddr_in addr;
	uint8_t prefix;
	int lfd;
	int epfd;
	int uepfd;		/* urgent lanes, itself in epfd */
	unsigned int nurgent;	/* sockets in uepfd */
	uint32_t slice;		/* bytes: TCP_SLICE_KB, slice_kb= */
	uint64_t hot_until;	/* TSC: urgent frames moved lately */
	unsigned int conns;	/* sockets per peer: conns=N data + 1 urgent */
	struct tcp_sock *socks;	/* every socket of the port */
	unsigned int rot;	/* the first ready socket served next poll */
	unsigned int nsocks;
	struct tcp_conn *accepted;	/* token owners */
	pthread_mutex_t lock;
	struct tcp_conn *dialed;	/* initiator connections */
	struct tcp_conn *giving_up;	/* lcore: to retire when a poll ends */
	struct tcp_conn *retiring;	/* lcore: connections holding work */
	uint64_t timeout_tsc;
	uint64_t stall_tsc;	/* a socket quiet this long: is it broken? */
	uint64_t last_turn;	/* TSC: the lcore's last poll of the port */
	uint8_t scratch[65536];	/* discarded payload */
};

/* Every port of this PMD (tcp.c; probe and remove, control path). */
extern struct tcp_port *tcp_ports[TCP_MAX_PORTS];
extern unsigned int tcp_nports;

/* Socket options for a data socket of tp. */
void tcp_tune(int fd, const struct tcp_port *tp);
/* Lcore: a socket joins its connection. */
void tcp_conn_sock_add(struct tcp_conn *c, struct tcp_sock *s);
/* Lcore: socket i leaves its connection. */
void tcp_conn_sock_del(struct tcp_conn *c, unsigned int i);
/* Lcore: close every socket of c, failing what each held with err. */
void tcp_conn_close_socks(struct kvt_port *port, struct tcp_conn *c, int err);
/* Lcore: close a socket (abortively: the kernel sends nothing of it
 * later).  Its work moves to another socket of its connection, else
 * fails with err: only for a socket the peer closed, or whose work may
 * go anywhere (see tcp_sock_fail). */
void tcp_sock_close(struct kvt_port *port, struct tcp_sock *s, int err);
/* Lcore: a socket failed with err, the error of the call or check that
 * found it (-ECONNRESET or -EPIPE: the peer closed it; else we give it
 * up): close it, and for an initiator socket holding work that the
 * target may still take, give up its whole connection
 * (tcp_conn_retire). */
void tcp_sock_fail(struct kvt_port *port, struct tcp_sock *s, int err);
/* Lcore: move the work socket s held (answers awaited, then frames
 * unsent) to the end of c's held list. */
void tcp_conn_hold(struct tcp_conn *c, struct tcp_sock *s);
/* Lcore: give up every socket of initiator connection c: closed at once,
 * their work held until the target confirms it closed its ends. */
void tcp_conn_retire(struct kvt_port *port, struct tcp_conn *c, int err);
/* Lcore, at the end of a poll: retire the connections one of whose
 * sockets was given up during it (its siblings may be in the poll's
 * lists of ready sockets until then). */
void tcp_retire_given_up(struct kvt_port *port);
/* Lcore: end the hold of a retiring connection: each tail the target
 * took (bit i of taken for rseq[i]) completes, everything else fails
 * with err (the engine moves slices to other ports). */
void tcp_conn_release(struct kvt_port *port, struct tcp_conn *c,
		      uint64_t taken, int err);
/* Lcore: release the held work of connections whose peer was lost. */
void tcp_retire_reap(struct kvt_port *port);
/* Control thread: ask again, or release, for a retiring connection;
 * @return 1 while it is retiring (no redial then). */
int tcp_retire_tick(struct kvt_port *port, struct tcp_conn *c, uint64_t now);
/* Control thread: a message from the other end of c (RETIRE at the
 * target, RETIRED at the initiator). */
int tcp_conn_msg(struct kvt_conn *kc, const uint8_t *msg, size_t len,
		 struct kvt_buf *reply);
/* Lcore: a new socket of the port (server: accepted here). */
struct tcp_sock *tcp_sock_add(struct tcp_port *tp, int fd, int server);
/* Target: a whole frame (and its payload) arrived. */
int tcp_serve_frame(struct kvt_port *port, struct tcp_sock *s);
/* Target: a whole frame header arrived. */
int tcp_serve_header(struct kvt_port *port, struct tcp_sock *s);
/* Close fd so that nothing it queued is sent later (SO_LINGER 0). */
void tcp_fd_abort(int fd);
/* Every send: MSG_NOSIGNAL (no SIGPIPE); as sendmsg(). */
ssize_t tcp_sock_sendv(int fd, struct iovec *iov, unsigned int n);
/* Target: read a new socket's hello and check its token; @return 1
 * (progress), 0 (more to come), -ECONNRESET, -EPROTO, -EACCES. */
int tcp_sock_auth(struct kvt_port *port, struct tcp_sock *s);
/* Target: send the answers owed, in order, while *budget bytes last
 * (it is reduced by what went); @return work, or -errno. */
int tcp_sock_respond(struct tcp_sock *s, uint32_t *budget);
/* Both: read what is there while *budget lasts; @return work, -errno. */
int tcp_sock_recv(struct kvt_port *port, struct tcp_sock *s, uint32_t *budget);
/* Initiator: send queued frames while *budget lasts; @return work,
 * -errno. */
int tcp_sock_send(struct tcp_sock *s, uint32_t *budget);
/* Lcore: s becomes an urgent lane (on), or a data socket again; @return
 * 0 or -errno (epoll). */
int tcp_sock_lane(struct tcp_port *tp, struct tcp_sock *s, int on);
/* n bytes moved: take them from *budget (never below 0). */
static inline void
tcp_spend(uint32_t *budget, size_t n)
{
	*budget -= (uint32_t)RTE_MIN(n, (size_t)*budget);
}

/* Lcore: an urgent frame moves on tp. */
void tcp_port_hot(struct tcp_port *tp);
/* Lcore: serve the port's urgent lanes that have something to read, and
 * answer them; @return work. */
unsigned int tcp_urgent_turn(struct kvt_port *port);
/* The port ops (tcp_sock.c, tcp_conn.c). */
void tcp_submit(struct kvt_port *port, struct kvt_desc **d, unsigned int n);
unsigned int tcp_poll(struct kvt_port *port);
uint64_t tcp_idle(struct kvt_port *port, int *fd);
void tcp_ctl_tick(struct kvt_port *port, uint64_t now);
int tcp_conn_open(struct kvt_port *port, const struct kvt_peer_info *pi,
		  const struct kvt_endpoint *eps, unsigned int neps,
		  struct kvt_buf *req, struct kvt_conn **out);
int tcp_conn_accept(struct kvt_port *port, const struct kvt_accept *a,
		    const uint8_t *req, size_t len, struct kvt_buf *rep,
		    struct kvt_conn **out);
int tcp_conn_ready(struct kvt_conn *kc, const uint8_t *rep, size_t len);
void tcp_conn_close(struct kvt_conn *kc);

#endif /* KVT_PMD_TCP_H */
