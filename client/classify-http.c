/* SPDX-License-Identifier: Apache-2.0 */
/*
 * classify-http.c — the HTTP status classifier for breakers: which
 * answers of an HTTP dependency count against it (5xx, 408, 429 and
 * transport errors) and which are the caller's business (other 4xx).
 */
#include "internal.h"

/* HTTP statuses (RFC 9110) the HTTP classifier knows. */
#define HTTP_STATUS_MIN 100
#define HTTP_STATUS_MAX 599
#define HTTP_REQUEST_TIMEOUT 408
#define HTTP_TOO_MANY_REQUESTS 429
#define HTTP_SERVER_ERROR 500

cbc_outcome
cbc_http_outcome(int status)
{
	if (status < HTTP_STATUS_MIN || status > HTTP_STATUS_MAX)
		return CBC_OUTCOME_FAILURE; /* no status: a transport error */
	if (status >= HTTP_SERVER_ERROR || status == HTTP_REQUEST_TIMEOUT ||
	    status == HTTP_TOO_MANY_REQUESTS)
		return CBC_OUTCOME_FAILURE;
	return CBC_OUTCOME_SUCCESS;
}

cbc_outcome
cbc_classify_http(int result, void *user)
{
	(void)user;
	return cbc_http_outcome(result);
}
