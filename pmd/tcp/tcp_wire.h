/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The tcp transport's data connection on the wire, shared by the PMD and
 * by the tests that speak it by hand (a hostile peer, the fault proxy).
 * Every field is little-endian.
 */
#ifndef KVT_TCP_WIRE_H
#define KVT_TCP_WIRE_H

#include <stdint.h>

#define TCP_HELLO_MAGIC 0x4b565444u	/* "KVTD" */
#define TCP_MAX_FRAME (64u << 20)	/* payload of one frame */
#define TCP_HELLO_VERSION 1u

/* A request of the urgent class: the target serves its socket ahead of
 * the others from then on (an older peer sends 0 here). */
#define TCP_F_URGENT 0x01u

/* Requests are odd, their answers the next even number. */
enum tcp_frame_type {
	F_WRITE = 1,
	F_WRITE_ACK,
	F_READ,
	F_READ_DATA,
	F_FENCE,
	F_FENCE_ACK,
	F_NOTIFY,
	F_NOTIFY_ACK,
	F_MAX,
};

/* A data frame header; WRITE, NOTIFY and READ_DATA (status 0) carry len
 * payload bytes after it. */
struct tcp_hdr {
	uint8_t type;
	uint8_t flags;		/* requests: TCP_F_URGENT */
	uint8_t rsvd[2];
	int32_t status;		/* answers: 0 or a negative errno */
	uint64_t addr;
	uint64_t aux;		/* FENCE: the room id; READ: the length */
	uint32_t len;		/* payload bytes that follow */
	uint32_t seq;		/* FENCE, NOTIFY: the peer's tail sequence
				 * number (0: none), so a tail sent again
				 * after a lost answer acts once */
};

/* The first bytes an initiator sends on a new data connection. */
struct tcp_hello {
	uint32_t magic;
	uint32_t version;
	uint8_t token[16];	/* issued by the target's CONN_REP */
};

/* A port's endpoint, as published in the control handshake. */
struct tcp_ep {
	uint32_t ip;		/* network order */
	uint16_t port;		/* network order */
	uint8_t prefix;
	uint8_t rsvd;
};

/*
 * Messages between the two ends of a connection, over the control
 * connection (kvt_conn_msg()).  An initiator that gives up its sockets
 * (a stall, a timeout: the target may still hold frames of theirs)
 * sends RETIRE before their work moves; the target closes every socket
 * that presented the token, issues a new one, and answers RETIRED with
 * whether each tail asked about acted there.  No frame of a retired
 * socket can act after that answer.
 */
#define TCP_RETIRE_SEQS 64
enum tcp_msg_type {
	TCP_M_RETIRE = 1,
	TCP_M_RETIRED = 2,
};

struct tcp_retire {
	uint8_t type;		/* TCP_M_RETIRE */
	uint8_t rsvd[3];
	uint32_t nseq;		/* <= TCP_RETIRE_SEQS */
	uint8_t token[16];	/* the sockets to close presented this */
	uint32_t seq[TCP_RETIRE_SEQS];	/* tails whose fate is asked */
};

struct tcp_retired {
	uint8_t type;		/* TCP_M_RETIRED */
	uint8_t rsvd[3];
	uint32_t nseq;		/* as asked */
	uint8_t token[16];	/* the token retired */
	uint8_t next[16];	/* new sockets present this one */
	uint64_t taken;		/* bit i: seq[i] acted */
};

/* Byte order of a header, in place. */
void tcp_hdr_to_wire(struct tcp_hdr *h);
void tcp_hdr_from_wire(struct tcp_hdr *h);

/*
 * Target: is h (host order) a request we serve?  *payload: the bytes
 * that follow it.  @return 0, or -EPROTO (hang up).
 */
int tcp_request_check(const struct tcp_hdr *h, uint32_t *payload);

/*
 * Initiator: is h (host order) the answer of type want to a request of
 * len bytes?  *payload: the bytes that follow it.  @return 0 or -EPROTO.
 */
int tcp_answer_check(const struct tcp_hdr *h, uint8_t want, uint32_t len,
		     uint32_t *payload);

/*
 * A message from the control connection, checked and in host order:
 * @return its type (TCP_M_RETIRE: *rq filled; TCP_M_RETIRED: *rd
 * filled), or -EPROTO.
 */
int tcp_msg_parse(const uint8_t *msg, size_t len, struct tcp_retire *rq,
		  struct tcp_retired *rd);

/*
 * The request's outcome from an answer's status: 0, or one of the errors
 * a target may answer with; anything else (a broken or lying peer: a
 * forged -EINPROGRESS, a positive count) is -EPROTO.
 */
int tcp_wire_status(int32_t status);

#endif
