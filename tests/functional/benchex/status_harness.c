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
 * The C BenchEx's status reader on its own, for test_status_c.py to hold
 * against benchex/status.py. Input on stdin: records of a 4-byte big-endian
 * length and that many bytes.
 *
 *   status_harness parse   each record is a line: its status JSON, or NONE
 *   status_harness feed    the records are reads of one stream: then
 *                          "RECEIVED SKIPPED" and the latest JSON, or NONE
 *   status_harness peer    each record is a --report-peer value: the peer the
 *                          reports would name, or NONE
 *   status_harness report  each record is "N MEAN STD P99 VM PEER" ("-": none):
 *                          the report line the reporter writes
 */
#define main benchex_main
#include "benchex.c"
#undef main

int main(int argc, char **argv)
{
	static char data[1 << 20];
	static struct status_reader s;
	char out[STATUS_JSON_MAX];
	unsigned char h[4];
	int feed = argc > 1 && !strcmp(argv[1], "feed");
	int peer = argc > 1 && !strcmp(argv[1], "peer");
	int report = argc > 1 && !strcmp(argv[1], "report");
	size_t n;
	while (fread(h, 1, 4, stdin) == 4) {
		n = get32(h);
		if (n >= sizeof(data) || fread(data, 1, n, stdin) != n)
			return 2;
		data[n] = 0;
		if (peer) {
			char text[PEER_BUF];
			if (strlen(data) != n || !peer_text(data, text))
				fputs("NONE\n", stdout);
			else
				printf("%s\n", text);
		} else if (report) {
			char vm[64], pr[PEER_BUF + 1], lower[PEER_BUF], line[256];
			size_t count;
			double mean, std, p99;
			if (sscanf(data, "%zu %lf %lf %lf %63s %64s", &count, &mean, &std, &p99, vm,
				   pr) != 6)
				return 2;
			if (strcmp(pr, "-") && !peer_text(pr, lower))
				return 2;   /* the reporter never takes one (reporter_init) */
			report_line(line, sizeof(line), count, mean, std, p99,
				    strcmp(vm, "-") ? vm : NULL, strcmp(pr, "-") ? lower : NULL);
			fputs(line, stdout);
		} else if (feed) {
			status_feed(&s, data, n);
			if (s.len >= STATUS_MAX_BYTES)
				return 3;
		} else {
			fputs(status_parse(data, n, out) ? "NONE\n" : out, stdout);
		}
	}
	if (feed)
		printf("%lu %lu\n%s", s.received, s.skipped, s.latest[0] ? s.latest : "NONE\n");
	return 0;
}
