/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may
 * not use this file except in compliance with the License. You may obtain
 * a copy of the License at
 *
 *      http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
 * WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
 * License for the specific language governing permissions and limitations
 * under the License.
 */

/*
 * BenchEx over RDMA verbs (`--transport verbs`): included by benchex.c when
 * built with -DBENCHEX_VERBS (benchex/build.sh builds `benchex-verbs` when
 * rdma-core's headers are installed). One RC queue pair per client, set up
 * with rdma_cm; the request (--request-bytes, e.g. the paper's 64 KB or
 * 2 MB buffer) travels as a SEND (--verb send) or as an RDMA WRITE with
 * immediate into the server's registered buffer (--verb write, the buffer's
 * address and rkey come in the server's accept private data); the reply
 * (--reply-bytes, at least the 16-byte header) is a SEND. The client names
 * its request size in its connect private data: the server sizes each
 * connection's buffer to it (up to 64 MiB), so one server serves any size. The server prices
 * options for --compute-us per request, as the TCP server does.
 *
 * The client is paced and closed-loop: request k is due at start + k/rate
 * and sent when due or, if the previous reply is late, as soon as it
 * arrives; its latency runs from its due time (coordinated omission
 * corrected, as the TCP open-loop client). Summaries go through the same
 * reporter as the TCP mode (latency channel or probe socket), naming the
 * server's GID as their peer with --report-peer auto;
 * --print-samples S also prints every latency, one line per S seconds:
 *   resex-lat tool=benchex verb=send bytes=65536 n=3 samples=812,790,1204
 */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define VERBS_HDR 16
#define VERBS_TIMEOUT_MS 10000
#define VERBS_SUMMARY_MAX (1u << 20)

struct vconn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_mr *rmr, *smr;
	unsigned char *rbuf, *sbuf;
	size_t rlen, slen;
	uint64_t raddr;
	uint32_t rkey;
};

static void vconn_free(struct vconn *v)
{
	if (v->id && v->id->qp)
		rdma_destroy_qp(v->id);
	if (v->rmr)
		ibv_dereg_mr(v->rmr);
	if (v->smr)
		ibv_dereg_mr(v->smr);
	if (v->cq)
		ibv_destroy_cq(v->cq);
	if (v->ch)
		ibv_destroy_comp_channel(v->ch);
	if (v->pd)
		ibv_dealloc_pd(v->pd);
	free(v->rbuf);
	free(v->sbuf);
	if (v->id)
		rdma_destroy_id(v->id);
	memset(v, 0, sizeof(*v));
}

/* PD, CQ with a completion channel, the RC QP and both buffers registered. */
static int vconn_setup(struct vconn *v, size_t rlen, size_t slen)
{
	struct ibv_qp_init_attr qa;
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	v->rlen = rlen;
	v->slen = slen;
	v->rbuf = calloc(1, rlen);
	v->sbuf = calloc(1, slen);
	if (!v->rbuf || !v->sbuf)
		return -1;
	v->pd = ibv_alloc_pd(v->id->verbs);
	v->ch = v->pd ? ibv_create_comp_channel(v->id->verbs) : NULL;
	v->cq = v->ch ? ibv_create_cq(v->id->verbs, 16, NULL, v->ch, 0) : NULL;
	if (!v->cq || ibv_req_notify_cq(v->cq, 0)) {
		perror("benchex: verbs: pd/cq");
		return -1;
	}
	fcntl(v->ch->fd, F_SETFL, fcntl(v->ch->fd, F_GETFL) | O_NONBLOCK);
	v->rmr = ibv_reg_mr(v->pd, v->rbuf, rlen, access);
	v->smr = ibv_reg_mr(v->pd, v->sbuf, slen, IBV_ACCESS_LOCAL_WRITE);
	if (!v->rmr || !v->smr) {
		perror("benchex: verbs: ibv_reg_mr");
		return -1;
	}
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = v->cq;
	qa.recv_cq = v->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 4;
	qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(v->id, v->pd, &qa)) {
		perror("benchex: verbs: rdma_create_qp");
		return -1;
	}
	return 0;
}

static int post_recv(struct vconn *v)
{
	struct ibv_sge sge = { (uintptr_t)v->rbuf, (uint32_t)v->rlen, v->rmr->lkey };
	struct ibv_recv_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(v->id->qp, &wr, &bad);
}

/* SEND (or RDMA WRITE with immediate `imm`) of `len` bytes of the send buffer. */
static int post_send(struct vconn *v, size_t len, int write, uint32_t imm)
{
	struct ibv_sge sge = { (uintptr_t)v->sbuf, (uint32_t)len, v->smr->lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 2;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (write) {
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.imm_data = htonl(imm);
		wr.wr.rdma.remote_addr = v->raddr;
		wr.wr.rdma.rkey = v->rkey;
	} else {
		wr.opcode = IBV_WR_SEND;
	}
	return ibv_post_send(v->id->qp, &wr, &bad);
}

/*
 * The next work completion: 1 (in *wc), 0 after timeout_ms, -1 on error.
 * Sleeps on the completion channel (no busy polling: a TCG vCPU is scarce).
 */
static int next_wc(struct vconn *v, struct ibv_wc *wc, int timeout_ms)
{
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		struct pollfd p = { v->ch->fd, POLLIN, 0 };
		struct ibv_cq *cq;
		void *ctx;
		int n = ibv_poll_cq(v->cq, 1, wc), left;
		if (n != 0)
			return n < 0 ? -1 : 1;
		if (stopping)
			return -1;
		left = (int)(((int64_t)deadline - (int64_t)now_ns()) / 1000000);
		if (left <= 0)
			return 0;
		n = poll(&p, 1, left > 200 ? 200 : left);
		if (n < 0 && errno != EINTR)
			return -1;
		if (n > 0 && ibv_get_cq_event(v->ch, &cq, &ctx) == 0) {
			ibv_ack_cq_events(cq, 1);
			if (ibv_req_notify_cq(v->cq, 0))
				return -1;
		}
	}
}

static int cm_wait(struct rdma_event_channel *ec, enum rdma_cm_event_type want,
		   struct rdma_cm_event **out, int timeout_ms)
{
	struct pollfd p = { ec->fd, POLLIN, 0 };
	struct rdma_cm_event *ev;
	int r = poll(&p, 1, timeout_ms);
	if (r <= 0) {
		fprintf(stderr, "benchex: verbs: no rdma_cm event (%s)\n",
			r == 0 ? "timeout" : strerror(errno));
		return -1;
	}
	if (rdma_get_cm_event(ec, &ev)) {
		perror("benchex: verbs: rdma_get_cm_event");
		return -1;
	}
	if (ev->event != want) {
		fprintf(stderr, "benchex: verbs: %s (status %d), waiting for %s\n",
			rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		rdma_ack_cm_event(ev);
		return -1;
	}
	if (out)
		*out = ev;
	else
		rdma_ack_cm_event(ev);
	return 0;
}

static void conn_params(struct rdma_conn_param *cp, const void *priv, uint8_t priv_len)
{
	memset(cp, 0, sizeof(*cp));
	cp->initiator_depth = 1;
	cp->responder_resources = 1;
	cp->retry_count = 7;
	cp->rnr_retry_count = 7;
	cp->private_data = priv;
	cp->private_data_len = priv_len;
}

/* Serve one connected client until it leaves; 0 when it disconnected cleanly. */
static int verbs_serve(struct vconn *v, struct rdma_event_channel *ec, const struct opts *o,
		       struct reporter *rep)
{
	uint64_t seed = 0;
	double sink = 0.0;
	unsigned long served = 0;
	int rc = 0;
	(void)rep;
	while (!stopping) {
		struct ibv_wc wc;
		struct pollfd p = { ec->fd, POLLIN, 0 };
		uint32_t seq;
		int r = next_wc(v, &wc, 200);
		if (r < 0) {
			rc = -1;
			break;
		}
		if (r == 0) {
			if (poll(&p, 1, 0) > 0) {
				struct rdma_cm_event *ev;
				if (rdma_get_cm_event(ec, &ev) == 0) {
					int gone = ev->event == RDMA_CM_EVENT_DISCONNECTED;
					rdma_ack_cm_event(ev);
					if (gone)
						break;
				}
			}
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			if (wc.status != IBV_WC_WR_FLUSH_ERR)
				fprintf(stderr, "benchex: verbs: completion %s\n",
					ibv_wc_status_str(wc.status));
			rc = wc.status == IBV_WC_WR_FLUSH_ERR ? 0 : -1;
			break;
		}
		if (wc.opcode == IBV_WC_SEND)
			continue;
		if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM)
			seq = ntohl(wc.imm_data);
		else
			seq = wc.byte_len >= VERBS_HDR && get32(v->rbuf) == REQUEST_MAGIC ?
				get32(v->rbuf + 4) : 0;
		if (o->compute_us > 0)
			sink += work(o->compute_us, &seed);
		if (post_recv(v)) {
			rc = -1;
			break;
		}
		put32(v->sbuf, REPLY_MAGIC);
		put32(v->sbuf + 4, seq);
		put64(v->sbuf + 8, (uint64_t)served++);
		if (post_send(v, v->slen, 0, 0)) {
			perror("benchex: verbs: post reply");
			rc = -1;
			break;
		}
	}
	if (sink == 42.0)
		fputc(' ', stderr);
	fprintf(stderr, "benchex: verbs: client left after %lu requests\n", served);
	return rc;
}

static int run_verbs_server(const struct opts *o)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *listen_id = NULL;
	struct sockaddr_storage ss;
	socklen_t len;
	struct reporter rep;
	size_t rlen = VERBS_HDR + (size_t)o->request_bytes;
	size_t slen = (size_t)o->reply_bytes < VERBS_HDR ? VERBS_HDR : (size_t)o->reply_bytes;

	if (!ec) {
		perror("benchex: verbs: rdma_create_event_channel (no RDMA device?)");
		return 2;
	}
	if (reporter_init(&rep, o) || make_addr(o->bind, o->port, &ss, &len))
		return 2;
	if (rdma_create_id(ec, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&ss) || rdma_listen(listen_id, 4)) {
		perror("benchex: verbs: listen");
		return 2;
	}
	fprintf(stderr, "benchex: verbs server on %s port %ld (request %zu bytes)\n",
		o->bind, o->port, rlen);
	while (!stopping) {
		struct rdma_cm_event *ev;
		struct rdma_conn_param cp;
		struct vconn v;
		unsigned char priv[16];
		struct pollfd p = { ec->fd, POLLIN, 0 };
		size_t want;
		int r = poll(&p, 1, 500);
		if (r <= 0)
			continue;
		if (rdma_get_cm_event(ec, &ev))
			break;
		if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			rdma_ack_cm_event(ev);
			continue;
		}
		memset(&v, 0, sizeof(v));
		v.id = ev->id;
		want = rlen;
		if (ev->param.conn.private_data_len >= 8 &&
		    get32(ev->param.conn.private_data) == REQUEST_MAGIC) {
			/* the client's request size: one server for every buffer size */
			uint32_t asked = get32((const unsigned char *)ev->param.conn.private_data + 4);
			if (asked > want && asked <= VERBS_HDR + MAX_BYTES)
				want = asked;
		}
		rdma_ack_cm_event(ev);
		if (vconn_setup(&v, want, slen) || post_recv(&v)) {
			rdma_reject(v.id, NULL, 0);
			vconn_free(&v);
			continue;
		}
		put64(priv, (uint64_t)(uintptr_t)v.rbuf);
		put32(priv + 8, v.rmr->rkey);
		put32(priv + 12, (uint32_t)want);
		conn_params(&cp, priv, sizeof(priv));
		if (rdma_accept(v.id, &cp) ||
		    cm_wait(ec, RDMA_CM_EVENT_ESTABLISHED, NULL, VERBS_TIMEOUT_MS)) {
			vconn_free(&v);
			continue;
		}
		verbs_serve(&v, ec, o, &rep);
		rdma_disconnect(v.id);
		vconn_free(&v);
	}
	reporter_close(&rep);
	rdma_destroy_id(listen_id);
	rdma_destroy_event_channel(ec);
	return 0;
}

struct sample_printer {
	double interval_s;
	uint64_t started;
	char *line;
	size_t len, cap;
	size_t n;
	const struct opts *o;
};

static void samples_flush(struct sample_printer *sp)
{
	sp->started = now_ns();
	if (sp->interval_s <= 0 || sp->n == 0)
		return;
	printf("resex-lat tool=benchex verb=%s bytes=%ld n=%zu samples=%s\n",
	       sp->o->verb_write ? "write" : "send", sp->o->request_bytes, sp->n, sp->line);
	fflush(stdout);
	sp->len = 0;
	sp->n = 0;
	if (sp->line)
		sp->line[0] = 0;
}

static void samples_add(struct sample_printer *sp, double us)
{
	char num[32];
	int k;
	if (sp->interval_s <= 0)
		return;
	k = snprintf(num, sizeof(num), "%s%.0f", sp->n ? "," : "", us);
	if (sp->len + (size_t)k + 1 > sp->cap) {
		size_t ncap = sp->cap ? sp->cap * 2 : 4096;
		char *n = realloc(sp->line, ncap);
		if (!n)
			return;
		sp->line = n;
		sp->cap = ncap;
	}
	memcpy(sp->line + sp->len, num, (size_t)k + 1);
	sp->len += (size_t)k;
	sp->n++;
	if ((double)(now_ns() - sp->started) / 1e9 >= sp->interval_s)
		samples_flush(sp);
}

/* A GID (16 bytes, network order) as eight groups of four hex digits; 0 if all zero. */
static int gid_peer(const unsigned char *raw, char *out)
{
	int i, any = 0;
	for (i = 0; i < 16; i++)
		any |= raw[i];
	if (!any)
		return 0;
	for (i = 0; i < 8; i++)
		snprintf(out + i * 5, 6, i < 7 ? "%02x%02x:" : "%02x%02x", raw[2 * i], raw[2 * i + 1]);
	return 1;
}

/*
 * With --report-peer auto the reports name the server's GID, as the resolved
 * route holds it (its path record, else the address's), or, when the route
 * has none, its address as resolved.
 */
static void verbs_name_peer(struct reporter *rep, struct rdma_cm_id *id)
{
	const union ibv_gid *dgid = &id->route.addr.addr.ibaddr.dgid;
	if (!rep->auto_peer || rep->peer[0])
		return;
	if (id->route.num_paths > 0 && id->route.path_rec)
		dgid = &id->route.path_rec[0].dgid;
	if (gid_peer(dgid->raw, rep->peer) ||
	    gid_peer(id->route.addr.addr.ibaddr.dgid.raw, rep->peer))
		return;
	reporter_connected(rep, rdma_get_peer_addr(id));
}

static int run_verbs_client(const struct opts *o)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	struct sockaddr_storage ss;
	socklen_t len;
	struct reporter rep;
	struct results res = { 0 };
	struct sample_printer sp = { 0 };
	struct vconn v;
	unsigned char hello[8];
	size_t slen = VERBS_HDR + (size_t)o->request_bytes;
	size_t rlen = (size_t)o->reply_bytes < VERBS_HDR ? VERBS_HDR : (size_t)o->reply_bytes;
	size_t keep = o->requests < VERBS_SUMMARY_MAX ? (size_t)o->requests : VERBS_SUMMARY_MAX;
	uint64_t start, interval_ns;
	long k, received = 0;
	int failed = 0;

	memset(&v, 0, sizeof(v));
	if (!ec) {
		perror("benchex: verbs: rdma_create_event_channel (no RDMA device?)");
		return 2;
	}
	if (reporter_init(&rep, o) || make_addr(o->host, o->port, &ss, &len))
		return 2;
	res.lat = malloc(sizeof(double) * keep);
	if (!res.lat)
		return 2;
	sp.interval_s = o->print_samples;
	sp.o = o;
	sp.started = now_ns();
	if (rdma_create_id(ec, &v.id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(v.id, NULL, (struct sockaddr *)&ss, 2000) ||
	    cm_wait(ec, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, VERBS_TIMEOUT_MS) ||
	    rdma_resolve_route(v.id, 2000) ||
	    cm_wait(ec, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, VERBS_TIMEOUT_MS) ||
	    vconn_setup(&v, rlen, slen)) {
		fprintf(stderr, "benchex: verbs: cannot reach %s:%ld\n", o->host, o->port);
		vconn_free(&v);
		return 2;
	}
	verbs_name_peer(&rep, v.id);
	put32(hello, REQUEST_MAGIC);
	put32(hello + 4, (uint32_t)slen);
	conn_params(&cp, hello, sizeof(hello));
	if (rdma_connect(v.id, &cp) ||
	    cm_wait(ec, RDMA_CM_EVENT_ESTABLISHED, &ev, VERBS_TIMEOUT_MS)) {
		fprintf(stderr, "benchex: verbs: connect to %s:%ld failed\n", o->host, o->port);
		vconn_free(&v);
		return 2;
	}
	if (ev->param.conn.private_data_len >= 16) {
		const unsigned char *priv = ev->param.conn.private_data;
		v.raddr = get64(priv);
		v.rkey = get32(priv + 8);
		if (get32(priv + 12) < slen && o->verb_write) {
			fprintf(stderr, "benchex: verbs: server buffer %u < request %zu bytes\n",
				get32(priv + 12), slen);
			failed = 1;
		}
	} else if (o->verb_write) {
		fputs("benchex: verbs: server sent no buffer for --verb write\n", stderr);
		failed = 1;
	}
	rdma_ack_cm_event(ev);
	put32(v.sbuf, REQUEST_MAGIC);
	put32(v.sbuf + 8, (uint32_t)o->request_bytes);
	interval_ns = o->rate > 0 ? (uint64_t)(1e9 / o->rate) : 0;
	start = now_ns();
	for (k = 0; k < o->requests && !failed && !stopping; k++) {
		uint64_t due = start + (uint64_t)k * interval_ns, t = now_ns();
		int got_reply = 0, sent_done = 0;
		double us;
		if (due > t) {
			struct timespec ts = { (time_t)((due - t) / 1000000000ull),
					       (long)((due - t) % 1000000000ull) };
			while (nanosleep(&ts, &ts) && errno == EINTR && !stopping)
				;
		} else if (!interval_ns) {
			due = t;
		}
		put32(v.sbuf + 4, (uint32_t)k);
		if (post_recv(&v) || post_send(&v, slen, o->verb_write, (uint32_t)k)) {
			perror("benchex: verbs: post");
			failed = 1;
			break;
		}
		while (!(got_reply && sent_done)) {
			struct ibv_wc wc;
			int r = next_wc(&v, &wc, VERBS_TIMEOUT_MS);
			if (r <= 0) {
				fprintf(stderr, "benchex: verbs: %s waiting for request %ld\n",
					r == 0 ? "timeout" : "error", k);
				failed = 1;
				break;
			}
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "benchex: verbs: completion %s\n",
					ibv_wc_status_str(wc.status));
				failed = 1;
				break;
			}
			if (wc.opcode & IBV_WC_RECV) {
				if (wc.byte_len < VERBS_HDR || get32(v.rbuf) != REPLY_MAGIC ||
				    get32(v.rbuf + 4) != (uint32_t)k) {
					fputs("benchex: verbs: bad reply\n", stderr);
					failed = 1;
					break;
				}
				got_reply = 1;
				us = (double)(now_ns() - due) / 1000.0;
				if ((size_t)res.n < keep)
					res.lat[res.n++] = us;
				reporter_add(&rep, us);
				samples_add(&sp, us);
				received++;
			} else {
				sent_done = 1;
			}
		}
	}
	samples_flush(&sp);
	{
		struct opts so = *o;
		so.requests = (long)res.n;
		print_summary(&so, &res, (double)(now_ns() - start) / 1e9);
	}
	rdma_disconnect(v.id);
	vconn_free(&v);
	rdma_destroy_event_channel(ec);
	reporter_close(&rep);
	free(res.lat);
	free(sp.line);
	return received == o->requests ? 0 : 1;
}
