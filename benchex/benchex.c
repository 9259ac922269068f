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
 * benchex: the BenchEx latency benchmark (ResEx paper, Section IV) for
 * guests with no Python: server, client and latency reporter in one static
 * binary. Same arguments, TCP protocol and report wire format as the Python
 * `benchex` (benchex/protocol.py, doc/source/latency.rst).
 *
 *   benchex server [--bind ADDR] [--port N] [--compute-us US] [--reply-bytes N] [REPORT]
 *   benchex client [--host H] [--port N] (--rate R | --concurrency C) [--requests N]
 *                  [--request-bytes N] [--json] [REPORT]
 *   REPORT: --report-channel PATH | --report-socket PATH --vm UUID  [--report-interval S]
 *
 * Over RDMA verbs (RC, rdma_cm; benchex_verbs.c, built as benchex-verbs):
 *   benchex server --transport verbs [--bind ADDR] [--port N] [--compute-us US]
 *                  [--request-bytes N] [--reply-bytes N]
 *   benchex client --transport verbs --host H [--port N] [--rate R] [--requests N]
 *                  [--request-bytes N] [--verb send|write] [--print-samples S] [REPORT]
 *
 * Build: gcc -O2 -static -o benchex benchex.c -lm   (benchex/build.sh)
 *        gcc -O2 -DBENCHEX_VERBS -o benchex-verbs benchex.c -lrdmacm -libverbs -lm
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define REQUEST_MAGIC 0x42585131u
#define REPLY_MAGIC 0x42585231u
#define REQUEST_SIZE 16
#define REPLY_SIZE 32
#define MAX_BYTES (64u << 20)
#define MAX_CLIENTS 1024
#define REPORT_MAX_SAMPLES 100000

static volatile sig_atomic_t stopping;

static void on_signal(int signum) { (void)signum; stopping = 1; }

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static uint32_t get32(const unsigned char *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static uint64_t get64(const unsigned char *p)
{
	return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += k;
		len -= (size_t)k;
	}
	return 0;
}

/* ---- Black-Scholes option pricing: the per-request work ------------------ */

static double norm_cdf(double x) { return 0.5 * (1.0 + erf(x / M_SQRT2)); }

static double black_scholes(double s, double k, double r, double v, double t, double *put)
{
	double sq = sqrt(t);
	double d1 = (log(s / k) + (r + 0.5 * v * v) * t) / (v * sq);
	double d2 = d1 - v * sq;
	double disc = k * exp(-r * t);
	*put = disc * norm_cdf(-d2) - s * norm_cdf(-d1);
	return s * norm_cdf(d1) - disc * norm_cdf(d2);
}

/* Price options for compute_us microseconds (at least one). */
static double work(double compute_us, uint64_t *seed)
{
	uint64_t deadline = now_ns() + (uint64_t)(compute_us * 1000.0);
	double checksum = 0.0;
	do {
		uint64_t k = (*seed)++;
		double put;
		double call = black_scholes(100.0 + k % 17, 95.0 + k % 13, 0.01 + (k % 5) * 0.005,
					    0.2 + (k % 7) * 0.05, 0.25 + (k % 4) * 0.25, &put);
		checksum += call - put;
	} while (now_ns() < deadline);
	return checksum;
}

/* ---- statistics --------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentile of an ascending array. */
static double percentile(const double *v, size_t n, double q)
{
	size_t rank;
	if (n == 0)
		return 0.0;
	/* less a hair: 99.9 / 100 x 1000 is 999.0000000000001 in binary floating point */
	rank = (size_t)ceil(q / 100.0 * (double)n - 1e-9);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

static void mean_std(const double *v, size_t n, double *mean, double *std)
{
	double s = 0.0, var = 0.0;
	size_t i;
	for (i = 0; i < n; i++)
		s += v[i];
	*mean = n ? s / (double)n : 0.0;
	for (i = 0; i < n; i++)
		var += (v[i] - *mean) * (v[i] - *mean);
	*std = n ? sqrt(var / (double)n) : 0.0;
}

/* ---- the reporter: v1 summaries to the agent's intake --------------------- */

struct reporter {
	const char *path;   /* NULL: not reporting */
	const char *vm;     /* set for the probe socket */
	double interval_s;
	double *vals;
	size_t n;
	uint64_t started;
	int fd;
	unsigned long sent, dropped;
};

static int reporter_open(struct reporter *r)
{
	struct stat st;
	if (stat(r->path, &st) == 0 && S_ISSOCK(st.st_mode)) {
		struct sockaddr_un sa;
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		memset(&sa, 0, sizeof(sa));
		sa.sun_family = AF_UNIX;
		strncpy(sa.sun_path, r->path, sizeof(sa.sun_path) - 1);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			close(fd);
			return -1;
		}
		return fd;
	}
	return open(r->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
}

static void reporter_flush(struct reporter *r)
{
	char line[256];
	double mean, std, p99, *sorted;
	int len;
	ssize_t k;
	size_t n = r->n;

	r->started = now_ns();
	if (!r->path || n == 0)
		return;
	r->n = 0;
	sorted = r->vals;
	mean_std(sorted, n, &mean, &std);
	qsort(sorted, n, sizeof(double), cmp_double);
	p99 = percentile(sorted, n, 99.0);
	if (mean < 0.001)
		mean = 0.001;
	if (p99 < 0.001)
		p99 = 0.001;
	if (r->vm)
		len = snprintf(line, sizeof(line),
			       "{\"v\":1,\"vm\":\"%s\",\"n\":%zu,\"mean_us\":%.3f,\"std_us\":%.3f,"
			       "\"p99_us\":%.3f}\n", r->vm, n, mean, std, p99);
	else
		len = snprintf(line, sizeof(line),
			       "{\"v\":1,\"n\":%zu,\"mean_us\":%.3f,\"std_us\":%.3f,\"p99_us\":%.3f}\n",
			       n, mean, std, p99);
	if (len <= 0 || (size_t)len >= sizeof(line)) {
		r->dropped++;
		return;
	}
	if (r->fd < 0)
		r->fd = reporter_open(r);
	if (r->fd < 0) {
		r->dropped++;
		return;
	}
	k = write(r->fd, line, (size_t)len);
	if (k != len) {
		/* a torn line would be rejected anyway: start afresh next time */
		close(r->fd);
		r->fd = -1;
		r->dropped++;
		return;
	}
	r->sent++;
}

static void reporter_add(struct reporter *r, double us)
{
	if (!r->path)
		return;
	r->vals[r->n++] = us;
	if (r->n >= REPORT_MAX_SAMPLES ||
	    (double)(now_ns() - r->started) / 1e9 >= r->interval_s)
		reporter_flush(r);
}

/* ---- options ------------------------------------------------------------- */

struct opts {
	const char *bind, *host, *report_channel, *report_socket, *vm;
	long port;
	double compute_us, rate, report_interval;
	long reply_bytes, request_bytes, concurrency, requests;
	int json;
	int verbs, verb_write;     /* --transport verbs, --verb write */
	double print_samples;      /* --print-samples S (verbs client) */
};

static void usage(FILE *f)
{
	fputs("usage: benchex server [--bind ADDR] [--port N] [--compute-us US] [--reply-bytes N]"
	      " [REPORT]\n"
	      "       benchex client [--host H] [--port N] (--rate R | --concurrency C)"
	      " [--requests N] [--request-bytes N] [--json] [REPORT]\n"
	      "       benchex {server|client} --transport verbs [--verb send|write]"
	      " [--print-samples S] ...\n"
	      "REPORT: --report-channel PATH | --report-socket PATH --vm UUID"
	      " [--report-interval S]\n", f);
}

static int parse_num(const char *name, const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi)) {
		fprintf(stderr, "benchex: %s: invalid value %s\n", name, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int valid_uuid(const char *s)
{
	int i;
	if (strlen(s) != 36)
		return 0;
	for (i = 0; i < 36; i++) {
		char c = s[i];
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return 0;
		} else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
			return 0;
		}
	}
	return 1;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	int i, rate_set = 0, conc_set = 0;
	double v;
	o->bind = "127.0.0.1";
	o->host = "127.0.0.1";
	o->port = 7788;
	o->compute_us = 10.0;
	o->reply_bytes = 64;
	o->request_bytes = 64;
	o->concurrency = 1;
	o->requests = 10000;
	o->report_interval = 0.1;
	for (i = 2; i < argc; i++) {
		const char *a = argv[i];
		const char *val = (i + 1 < argc) ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json")) {
			o->json = 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (!val) {
			fprintf(stderr, "benchex: %s needs a value\n", a);
			return -1;
		}
		i++;
		if (!strcmp(a, "--bind")) {
			o->bind = val;
		} else if (!strcmp(a, "--host")) {
			o->host = val;
		} else if (!strcmp(a, "--transport")) {
			if (strcmp(val, "tcp") && strcmp(val, "verbs")) {
				fprintf(stderr, "benchex: --transport: tcp or verbs, not %s\n", val);
				return -1;
			}
			o->verbs = !strcmp(val, "verbs");
		} else if (!strcmp(a, "--verb")) {
			if (strcmp(val, "send") && strcmp(val, "write")) {
				fprintf(stderr, "benchex: --verb: send or write, not %s\n", val);
				return -1;
			}
			o->verb_write = !strcmp(val, "write");
		} else if (!strcmp(a, "--print-samples")) {
			if (parse_num(a, val, 0, 1e6, &o->print_samples))
				return -1;
		} else if (!strcmp(a, "--report-channel")) {
			o->report_channel = val;
		} else if (!strcmp(a, "--report-socket")) {
			o->report_socket = val;
		} else if (!strcmp(a, "--vm")) {
			o->vm = val;
		} else if (!strcmp(a, "--port")) {
			if (parse_num(a, val, 0, 65535, &v))
				return -1;
			o->port = (long)v;
		} else if (!strcmp(a, "--compute-us")) {
			if (parse_num(a, val, 0, 1e9, &o->compute_us))
				return -1;
		} else if (!strcmp(a, "--rate")) {
			if (parse_num(a, val, 1e-6, 1e9, &o->rate))
				return -1;
			rate_set = 1;
		} else if (!strcmp(a, "--report-interval")) {
			if (parse_num(a, val, 1e-6, 1e6, &o->report_interval))
				return -1;
		} else if (!strcmp(a, "--reply-bytes")) {
			if (parse_num(a, val, 0, MAX_BYTES, &v))
				return -1;
			o->reply_bytes = (long)v;
		} else if (!strcmp(a, "--request-bytes")) {
			if (parse_num(a, val, 0, MAX_BYTES, &v))
				return -1;
			o->request_bytes = (long)v;
		} else if (!strcmp(a, "--concurrency")) {
			if (parse_num(a, val, 1, MAX_CLIENTS, &v))
				return -1;
			o->concurrency = (long)v;
			conc_set = 1;
		} else if (!strcmp(a, "--requests")) {
			if (parse_num(a, val, 1, 1e8, &v))
				return -1;
			o->requests = (long)v;
		} else {
			fprintf(stderr, "benchex: unknown option %s\n", a);
			return -1;
		}
	}
	if (rate_set && conc_set) {
		fputs("benchex: --rate and --concurrency exclude each other\n", stderr);
		return -1;
	}
	if (o->report_channel && o->report_socket) {
		fputs("benchex: --report-channel and --report-socket exclude each other\n", stderr);
		return -1;
	}
	if (o->report_socket && (!o->vm || !valid_uuid(o->vm))) {
		fputs("benchex: --report-socket needs --vm UUID (lower-case canonical)\n", stderr);
		return -1;
	}
	if (o->report_channel && o->vm) {
		fputs("benchex: --vm is not allowed with --report-channel\n", stderr);
		return -1;
	}
	if (o->verbs && conc_set) {
		fputs("benchex: --transport verbs is paced by --rate (one request in flight)\n",
		      stderr);
		return -1;
	}
	return 0;
}

static int reporter_init(struct reporter *r, const struct opts *o)
{
	memset(r, 0, sizeof(*r));
	r->fd = -1;
	r->interval_s = o->report_interval;
	r->started = now_ns();
	if (o->report_socket) {
		r->path = o->report_socket;
		r->vm = o->vm;
	} else if (o->report_channel) {
		r->path = o->report_channel;
	}
	if (r->path) {
		r->vals = malloc(sizeof(double) * REPORT_MAX_SAMPLES);
		if (!r->vals)
			return -1;
	}
	return 0;
}

static void reporter_close(struct reporter *r)
{
	reporter_flush(r);
	if (r->fd >= 0)
		close(r->fd);
	free(r->vals);
}

/* ---- the server ---------------------------------------------------------- */

struct client {
	int fd;
	unsigned gen;
	unsigned char hdr[REQUEST_SIZE];
	size_t hdr_got;
	int have_hdr;
	uint32_t seq;
	uint64_t skip;
};

struct queued {
	int slot;
	unsigned gen;
	uint32_t seq;
	uint32_t arrival;
	uint64_t t_arrival;
};

struct fifo {
	struct queued *items;
	size_t head, len, cap;
};

static int fifo_push(struct fifo *q, struct queued item)
{
	if (q->len == q->cap) {
		size_t ncap = q->cap ? q->cap * 2 : 256, i;
		struct queued *n = malloc(ncap * sizeof(*n));
		if (!n)
			return -1;
		for (i = 0; i < q->len; i++)
			n[i] = q->items[(q->head + i) % q->cap];
		free(q->items);
		q->items = n;
		q->head = 0;
		q->cap = ncap;
	}
	q->items[(q->head + q->len) % q->cap] = item;
	q->len++;
	return 0;
}

static struct queued fifo_pop(struct fifo *q)
{
	struct queued item = q->items[q->head];
	q->head = (q->head + 1) % q->cap;
	q->len--;
	return item;
}

/*
 * Numeric addresses only (IPv4 or IPv6, or "localhost"): a static binary
 * cannot use glibc's NSS, and the lab's busybox guests have no resolver.
 */
static int make_addr(const char *host, long port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	memset(ss, 0, sizeof(*ss));
	if (!strcmp(host, "localhost"))
		host = "127.0.0.1";
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		*len = sizeof(*in4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*in6);
		return 0;
	}
	fprintf(stderr, "benchex: %s is not a numeric IPv4/IPv6 address\n", host);
	return -1;
}

static int listen_on(const char *host, long port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, one = 1;
	if (make_addr(host, port, &ss, &len))
		return -1;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		perror("benchex: socket");
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 128) < 0) {
		perror("benchex: bind");
		close(fd);
		return -1;
	}
	return fd;
}

static int local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* Consume bytes from one client; queue every request completed. */
static int server_feed(struct client *c, int slot, const unsigned char *buf, size_t len,
		       struct fifo *q, uint32_t *arrivals)
{
	while (len > 0 || (c->have_hdr && c->skip == 0)) {
		if (c->have_hdr) {
			size_t k = c->skip < len ? (size_t)c->skip : len;
			c->skip -= k;
			buf += k;
			len -= k;
			if (c->skip == 0) {
				struct queued item = { slot, c->gen, c->seq, (*arrivals)++, now_ns() };
				if (fifo_push(q, item))
					return -1;
				c->have_hdr = 0;
				c->hdr_got = 0;
			}
			continue;
		}
		while (len > 0 && c->hdr_got < REQUEST_SIZE) {
			c->hdr[c->hdr_got++] = *buf++;
			len--;
		}
		if (c->hdr_got < REQUEST_SIZE)
			break;
		if (get32(c->hdr) != REQUEST_MAGIC || get32(c->hdr + 8) > MAX_BYTES)
			return -1;
		c->seq = get32(c->hdr + 4);
		c->skip = get32(c->hdr + 8);
		c->have_hdr = 1;
	}
	return 0;
}

static int run_server(const struct opts *o)
{
	static struct client clients[MAX_CLIENTS];
	struct pollfd pfds[MAX_CLIENTS + 1];
	int slots[MAX_CLIENTS + 1];
	struct fifo q = { 0 };
	struct reporter rep;
	unsigned char *reply, *buf;
	uint32_t arrivals = 0, processed = 0;
	uint64_t seed = 0;
	double sink = 0.0;
	unsigned gen = 0;
	int lfd, i;

	if (reporter_init(&rep, o))
		return 2;
	lfd = listen_on(o->bind, o->port);
	if (lfd < 0)
		return 2;
	reply = calloc(1, REPLY_SIZE + (size_t)o->reply_bytes);
	buf = malloc(65536);
	if (!reply || !buf)
		return 2;
	for (i = 0; i < MAX_CLIENTS; i++)
		clients[i].fd = -1;
	printf("benchex server listening on %s:%d\n", o->bind, local_port(lfd));
	fflush(stdout);

	while (!stopping) {
		int n = 0, r;
		pfds[n].fd = lfd;
		pfds[n].events = POLLIN;
		slots[n++] = -1;
		for (i = 0; i < MAX_CLIENTS; i++) {
			if (clients[i].fd >= 0) {
				pfds[n].fd = clients[i].fd;
				pfds[n].events = POLLIN;
				slots[n++] = i;
			}
		}
		r = poll(pfds, (nfds_t)n, 500);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			perror("benchex: poll");
			break;
		}
		for (i = 0; i < n; i++) {
			if (!pfds[i].revents)
				continue;
			if (slots[i] < 0) {
				int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), s, one = 1;
				if (cfd < 0)
					continue;
				for (s = 0; s < MAX_CLIENTS && clients[s].fd >= 0; s++)
					;
				if (s == MAX_CLIENTS) {
					close(cfd);
					continue;
				}
				setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				memset(&clients[s], 0, sizeof(clients[s]));
				clients[s].fd = cfd;
				clients[s].gen = ++gen;
			} else {
				struct client *c = &clients[slots[i]];
				ssize_t k = read(c->fd, buf, 65536);
				if (k < 0 && errno == EINTR)
					continue;
				if (k <= 0 || server_feed(c, slots[i], buf, (size_t)k, &q, &arrivals)) {
					close(c->fd);
					c->fd = -1;
				}
			}
		}
		/* first come, first served: the whole queue, in arrival order */
		while (q.len > 0) {
			struct queued item = fifo_pop(&q);
			struct client *c = &clients[item.slot];
			uint64_t server_ns;
			sink += work(o->compute_us, &seed);
			server_ns = now_ns() - item.t_arrival;
			if (c->fd >= 0 && c->gen == item.gen) {
				put32(reply, REPLY_MAGIC);
				put32(reply + 4, item.seq);
				put32(reply + 8, item.arrival);
				put32(reply + 12, processed);
				put64(reply + 16, server_ns);
				put32(reply + 24, (uint32_t)o->reply_bytes);
				put32(reply + 28, 0);
				if (write_all(c->fd, reply, REPLY_SIZE + (size_t)o->reply_bytes)) {
					close(c->fd);
					c->fd = -1;
				}
			}
			processed++;
			reporter_add(&rep, (double)server_ns / 1000.0);
		}
	}
	for (i = 0; i < MAX_CLIENTS; i++)
		if (clients[i].fd >= 0)
			close(clients[i].fd);
	close(lfd);
	reporter_close(&rep);
	free(q.items);
	free(reply);
	free(buf);
	return sink == 12345.6789 ? 3 : 0; /* keep the pricing from being optimised away */
}

/* ---- the client ---------------------------------------------------------- */

struct conn {
	int fd;
	unsigned char hdr[REPLY_SIZE];
	size_t hdr_got;
	int have_hdr;
	uint64_t skip;
	uint32_t seq, arrival, order;
	int have_last;
	uint32_t last_order;
	uint64_t sent_at; /* closed loop: send time of the outstanding request */
	uint32_t next_seq;
	int outstanding;
};

static int connect_to(const char *host, long port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, one = 1;
	if (make_addr(host, port, &ss, &len))
		return -1;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&ss, len) < 0) {
		perror("benchex: connect");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/*
 * Parse reply bytes; for each complete reply call back with its fields.
 * Returns the number of replies completed, or -1 on a protocol error.
 */
static int client_feed(struct conn *c, const unsigned char **pbuf, size_t *plen)
{
	const unsigned char *buf = *pbuf;
	size_t len = *plen;
	for (;;) {
		if (c->have_hdr) {
			size_t k = c->skip < len ? (size_t)c->skip : len;
			c->skip -= k;
			buf += k;
			len -= k;
			if (c->skip > 0)
				break;
			c->have_hdr = 0;
			c->hdr_got = 0;
			*pbuf = buf;
			*plen = len;
			return 1;
		}
		while (len > 0 && c->hdr_got < REPLY_SIZE) {
			c->hdr[c->hdr_got++] = *buf++;
			len--;
		}
		if (c->hdr_got < REPLY_SIZE)
			break;
		if (get32(c->hdr) != REPLY_MAGIC || get32(c->hdr + 24) > MAX_BYTES)
			return -1;
		c->seq = get32(c->hdr + 4);
		c->arrival = get32(c->hdr + 8);
		c->order = get32(c->hdr + 12);
		(void)get64(c->hdr + 16);
		c->skip = get32(c->hdr + 24);
		c->have_hdr = 1;
	}
	*pbuf = buf;
	*plen = len;
	return 0;
}

struct results {
	double *lat;
	size_t n;
	unsigned long fcfs_violations;
};

static void record(struct results *res, struct reporter *rep, struct conn *c, double us)
{
	res->lat[res->n++] = us;
	if (c->order != c->arrival || (c->have_last && c->order <= c->last_order))
		res->fcfs_violations++;
	c->have_last = 1;
	c->last_order = c->order;
	reporter_add(rep, us);
}

static int send_request(int fd, unsigned char *req, size_t len, uint32_t seq)
{
	put32(req + 4, seq);
	return write_all(fd, req, len);
}

static void print_summary(const struct opts *o, struct results *res, double elapsed)
{
	double mean, std, *v = res->lat;
	size_t n = res->n;
	unsigned long errors = (unsigned long)o->requests - n;
	mean_std(v, n, &mean, &std);
	qsort(v, n, sizeof(double), cmp_double);
	if (o->json)
		printf("{\"requests\": %zu, \"errors\": %lu, \"fcfs_violations\": %lu, "
		       "\"elapsed_s\": %.6f, \"throughput_rps\": %.3f, \"mean_us\": %.3f, "
		       "\"std_us\": %.3f, \"min_us\": %.3f, \"p50_us\": %.3f, \"p99_us\": %.3f, "
		       "\"p999_us\": %.3f, \"max_us\": %.3f}\n",
		       n, errors, res->fcfs_violations, elapsed,
		       elapsed > 0 ? n / elapsed : 0.0, mean, std, n ? v[0] : 0.0,
		       percentile(v, n, 50), percentile(v, n, 99), percentile(v, n, 99.9),
		       n ? v[n - 1] : 0.0);
	else
		printf("requests %zu  errors %lu  fcfs_violations %lu\n"
		       "throughput %.1f req/s over %.3f s\n"
		       "latency us: mean %.1f  std %.1f  min %.1f  p50 %.1f  p99 %.1f  p99.9 %.1f"
		       "  max %.1f\n",
		       n, errors, res->fcfs_violations, elapsed > 0 ? n / elapsed : 0.0, elapsed,
		       mean, std, n ? v[0] : 0.0, percentile(v, n, 50), percentile(v, n, 99),
		       percentile(v, n, 99.9), n ? v[n - 1] : 0.0);
	fflush(stdout);
}

static int run_client(const struct opts *o)
{
	struct results res = { 0 };
	struct reporter rep;
	struct conn *conns;
	struct pollfd *pfds;
	unsigned char *req, *buf;
	size_t req_len = REQUEST_SIZE + (size_t)o->request_bytes;
	long ncon = o->rate > 0 ? 1 : o->concurrency, i;
	long sent = 0, received = 0;
	uint64_t start, *scheduled = NULL, interval_ns = 0;
	int failed = 0;

	if (reporter_init(&rep, o))
		return 2;
	res.lat = malloc(sizeof(double) * (size_t)o->requests);
	conns = calloc((size_t)ncon, sizeof(*conns));
	pfds = calloc((size_t)ncon, sizeof(*pfds));
	req = calloc(1, req_len);
	buf = malloc(65536);
	if (!res.lat || !conns || !pfds || !req || !buf)
		return 2;
	if (o->rate > 0) {
		scheduled = calloc((size_t)o->requests, sizeof(uint64_t));
		if (!scheduled)
			return 2;
		interval_ns = (uint64_t)(1e9 / o->rate);
	}
	put32(req, REQUEST_MAGIC);
	put32(req + 8, (uint32_t)o->request_bytes);
	for (i = 0; i < ncon; i++) {
		conns[i].fd = connect_to(o->host, o->port);
		if (conns[i].fd < 0)
			return 2;
		pfds[i].fd = conns[i].fd;
		pfds[i].events = POLLIN;
	}
	start = now_ns();
	if (!scheduled) {
		for (i = 0; i < ncon && sent < o->requests; i++, sent++) {
			conns[i].sent_at = now_ns();
			conns[i].outstanding = 1;
			if (send_request(conns[i].fd, req, req_len, conns[i].next_seq++))
				failed = 1;
		}
	}
	while (!failed && !stopping && received < o->requests) {
		struct timespec timeout = { 1, 0 };
		int r;
		if (scheduled) {
			uint64_t t = now_ns();
			while (sent < o->requests && start + (uint64_t)sent * interval_ns <= t) {
				scheduled[sent] = start + (uint64_t)sent * interval_ns;
				if (send_request(conns[0].fd, req, req_len, (uint32_t)sent)) {
					failed = 1;
					break;
				}
				sent++;
			}
			if (sent < o->requests) {
				uint64_t due = start + (uint64_t)sent * interval_ns;
				uint64_t wait;
				t = now_ns();
				wait = due > t ? due - t : 0;
				timeout.tv_sec = (time_t)(wait / 1000000000ull);
				timeout.tv_nsec = (long)(wait % 1000000000ull);
			}
		}
		r = ppoll(pfds, (nfds_t)ncon, &timeout, NULL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (i = 0; i < ncon && !failed; i++) {
			const unsigned char *p;
			size_t len;
			ssize_t k;
			if (!pfds[i].revents)
				continue;
			k = read(conns[i].fd, buf, 65536);
			if (k <= 0) {
				failed = 1;
				break;
			}
			p = buf;
			len = (size_t)k;
			for (;;) {
				int got = client_feed(&conns[i], &p, &len);
				uint64_t t = now_ns();
				struct conn *c = &conns[i];
				if (got < 0) {
					failed = 1;
					break;
				}
				if (got == 0)
					break;
				if (scheduled) {
					if (c->seq >= (uint32_t)sent) {
						failed = 1;
						break;
					}
					record(&res, &rep, c, (double)(t - scheduled[c->seq]) / 1000.0);
				} else {
					if (c->seq + 1 != c->next_seq || !c->outstanding) {
						failed = 1;
						break;
					}
					record(&res, &rep, c, (double)(t - c->sent_at) / 1000.0);
					c->outstanding = 0;
					if (sent < o->requests) {
						sent++;
						c->outstanding = 1;
						c->sent_at = now_ns();
						if (send_request(c->fd, req, req_len, c->next_seq++)) {
							failed = 1;
							break;
						}
					}
				}
				received++;
			}
		}
	}
	print_summary(o, &res, (double)(now_ns() - start) / 1e9);
	for (i = 0; i < ncon; i++)
		close(conns[i].fd);
	reporter_close(&rep);
	free(res.lat);
	free(conns);
	free(pfds);
	free(req);
	free(buf);
	free(scheduled);
	return received == o->requests ? 0 : 1;
}

#ifdef BENCHEX_VERBS
#include "benchex_verbs.c"
#endif

int main(int argc, char **argv)
{
	struct opts o;
	struct sigaction sa;
	memset(&o, 0, sizeof(o));
	if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		usage(stderr);
		return 2;
	}
	if (parse_opts(argc, argv, &o))
		return 2;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (o.verbs) {
#ifdef BENCHEX_VERBS
		return strcmp(argv[1], "server") == 0 ? run_verbs_server(&o) : run_verbs_client(&o);
#else
		fputs("benchex: built without verbs (benchex-verbs has them)\n", stderr);
		return 2;
#endif
	}
	return strcmp(argv[1], "server") == 0 ? run_server(&o) : run_client(&o);
}
