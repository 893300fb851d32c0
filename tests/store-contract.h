/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store-contract.h — the cases every circuit store must pass, written once
 * and run against each store: the in-memory table (check_circuit_table),
 * cbd over its socket, and libcbclient's local, remote and resilient stores.
 *
 * A store plugs in through contract_impl: a create/teardown pair and one
 * function per store operation. Every operation takes the full policy and
 * `now` (virtual time) so the cases are deterministic.
 */
#ifndef CBD_STORE_CONTRACT_H
#define CBD_STORE_CONTRACT_H

#include <stdbool.h>
#include <stdint.h>

#include <check.h>

#include "breaker.h"

/* Room for a slot token from any store (remote tokens are opaque). */
#define CONTRACT_TOKEN_SIZE 128

typedef enum contract_status {
	CONTRACT_OK = 0,
	CONTRACT_CAPACITY, /* max_circuits reached, nothing created */
	CONTRACT_ERROR, /* any other failure: the case fails */
} contract_status;

typedef struct contract_impl {
	const char *name;
	/* A fresh, empty store holding at most max_circuits circuits. Each call
	 * must behave like a new process: slot tokens never repeat across calls. */
	void *(*create)(uint64_t max_circuits);
	void (*teardown)(void *store);
	contract_status (*get)(void *store, const char *name, const cb_policy *policy, int64_t now,
	    cb_snapshot *out);
	contract_status (*record_success)(void *store, const char *name, const cb_policy *policy,
	    int64_t now, cb_snapshot *out);
	contract_status (*record_failure)(void *store, const char *name, const cb_policy *policy,
	    int64_t now, cb_snapshot *out);
	contract_status (*cas)(void *store, const char *name, cb_state from, cb_state to,
	    const cb_policy *policy, int64_t now, bool *applied, cb_snapshot *out);
	contract_status (*set_state)(void *store, const char *name, cb_state state,
	    const cb_policy *policy, int64_t now, cb_snapshot *out);
	contract_status (*acquire_slot)(void *store, const char *name, const cb_policy *policy,
	    int64_t now, bool *acquired, char token[CONTRACT_TOKEN_SIZE], int64_t *expires_at);
	contract_status (*release_slot)(void *store, const char *name, const char *token,
	    const cb_policy *policy, int64_t now);
	contract_status (*delete_circuit)(void *store, const char *name, bool *existed);
} contract_impl;

/* The contract as a check suite named after impl->name. impl must outlive
 * the suite run. */
Suite *contract_suite(const contract_impl *impl);

#endif
