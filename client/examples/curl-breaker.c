/* SPDX-License-Identifier: Apache-2.0 */
/*
 * curl-breaker.c — libcbclient's libcurl example: HTTP GETs protected by
 * a circuit shared through cbd, each classified from its CURLcode and
 * its HTTP status (cbc_classify_http).
 *
 *   curl-breaker [-s SOCKET] [-c CIRCUIT] [-n CALLS] [-t TIMEOUT_MS] URL
 *
 * Each call's result is the response's status (100..599) or, when no
 * response came, the negated CURLcode. The classifier counts 5xx, 408,
 * 429 and transport errors (refused, timed out, reset...) as failures;
 * other statuses are the dependency answering (success); a URL libcurl
 * cannot even try (malformed, unsupported scheme) says nothing about the
 * dependency (ignored). While the circuit is open the request is not
 * made. One line per call on stdout:
 *   call N: status S (success|failure)
 *   call N: curl error C: MESSAGE (failure|ignored)
 *   call N: refused: circuit open, retry in M ms
 * Built by make check when configure finds libcurl (tests/curl-example.sh).
 * pkg-config: libcurl
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cbclient.h>
#include <curl/curl.h>

static const char usage[] =
    "usage: curl-breaker [-s SOCKET] [-c CIRCUIT] [-n CALLS] [-t TIMEOUT_MS] URL\n"
    "GETs URL CALLS times (default 10) through the circuit CIRCUIT (default\n"
    "\"curl-demo\") in cbd (SOCKET, else $CBD_SOCKET, else /run/cbd/cbd.sock),\n"
    "each with a timeout of TIMEOUT_MS (default 2000).\n";

/* Bounds of the options. */
#define CALLS_MAX 1000000
#define TIMEOUT_MS_MAX 600000

/* One request: the handle, and what the last call got. */
typedef struct request {
	CURL *curl;
	const char *url;
	long timeout_ms;
	CURLcode code; /* CURLE_OK when a response came */
	char error[CURL_ERROR_SIZE];
} request;

/* The body is not kept: the status is what the breaker needs. */
static size_t
discard(char *data, size_t size, size_t n, void *user)
{
	(void)data;
	(void)user;
	return size * n;
}

/* The protected call: the status, or -CURLcode when no response came. */
static int
http_get(void *arg)
{
	request *r = arg;
	long status = 0;

	r->error[0] = '\0';
	curl_easy_setopt(r->curl, CURLOPT_URL, r->url);
	curl_easy_setopt(r->curl, CURLOPT_TIMEOUT_MS, r->timeout_ms);
	curl_easy_setopt(r->curl, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(r->curl, CURLOPT_ERRORBUFFER, r->error);
	curl_easy_setopt(r->curl, CURLOPT_NOSIGNAL, 1L);
	r->code = curl_easy_perform(r->curl);
	if (r->code != CURLE_OK)
		return -(int)r->code;
	curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status);
	return (int)status;
}

/* CURLcode first (no response), then the HTTP status. */
static cbc_outcome
classify(int result, void *user)
{
	(void)user;
	if (result < 0) {
		switch ((CURLcode)-result) {
		case CURLE_URL_MALFORMAT:
		case CURLE_UNSUPPORTED_PROTOCOL:
			return CBC_OUTCOME_IGNORE; /* never reached the dependency */
		default:
			return CBC_OUTCOME_FAILURE; /* refused, timed out, reset... */
		}
	}
	return cbc_classify_http(result, NULL);
}

/* A number from text in [min, max], else exit with usage. */
static long
number(const char *text, const char *what, long min, long max)
{
	char *end;
	long v = strtol(text, &end, 10);

	if (*text == '\0' || *end != '\0' || v < min || v > max) {
		fprintf(stderr, "curl-breaker: %s must be from %ld to %ld: %s\n%s", what, min, max,
		    text, usage);
		exit(2);
	}
	return v;
}

int
main(int argc, char **argv)
{
	const char *socket_path = NULL, *circuit = "curl-demo";
	long calls = 10;
	request r = { .timeout_ms = 2000 };
	cbc_breaker_options o;
	cbc_breaker *b;
	cbc_store *store;
	cbc_conn *conn;
	cbc_error err;
	int opt;

	if (argc > 1 && strcmp(argv[1], "--help") == 0) {
		fputs(usage, stdout);
		return 0;
	}
	while ((opt = getopt(argc, argv, "s:c:n:t:h")) != -1) {
		switch (opt) {
		case 's':
			socket_path = optarg;
			break;
		case 'c':
			circuit = optarg;
			break;
		case 'n':
			calls = number(optarg, "CALLS", 1, CALLS_MAX);
			break;
		case 't':
			r.timeout_ms = number(optarg, "TIMEOUT_MS", 1, TIMEOUT_MS_MAX);
			break;
		default:
			fputs(usage, opt == 'h' ? stdout : stderr);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (optind != argc - 1) {
		fputs(usage, stderr);
		return 2;
	}
	r.url = argv[optind];
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK ||
	    (r.curl = curl_easy_init()) == NULL) {
		fprintf(stderr, "curl-breaker: libcurl could not start\n");
		return 1;
	}
	conn = cbc_conn_new(socket_path, &err);
	store = conn != NULL ? cbc_store_new_remote(conn, &err) : NULL;
	cbc_breaker_options_init(&o);
	o.name = circuit;
	o.store = store;
	o.classify = classify;
	b = store != NULL ? cbc_breaker_new(&o, &err) : NULL;
	if (b == NULL) {
		fprintf(stderr, "curl-breaker: %s\n", err.message);
		return 1;
	}
	for (long i = 1; i <= calls; i++) {
		cbc_exec_result res;
		cbc_status st = cbc_breaker_execute(b, http_get, &r, &res, &err);

		if (st == CBC_EOPEN) {
			printf("call %ld: refused: circuit open, retry in %lld ms\n", i,
			    (long long)res.retry_after_ms);
		} else if (st != CBC_OK) {
			printf("call %ld: not made: %s\n", i, err.message);
		} else if (res.result < 0) {
			printf("call %ld: curl error %d: %s (%s)\n", i, -res.result,
			    r.error[0] != '\0' ? r.error : curl_easy_strerror(r.code),
			    res.outcome == CBC_OUTCOME_IGNORE ? "ignored" : "failure");
		} else {
			printf("call %ld: status %d (%s)\n", i, res.result,
			    res.outcome == CBC_OUTCOME_FAILURE ? "failure" : "success");
		}
		fflush(stdout);
	}
	cbc_breaker_free(b);
	cbc_store_free(store);
	cbc_conn_free(conn);
	curl_easy_cleanup(r.curl);
	curl_global_cleanup();
	return 0;
}
