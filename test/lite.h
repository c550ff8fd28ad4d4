/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The few Criterion macros the stress tests use, for the one build where
 * Criterion cannot run: ThreadSanitizer (Criterion's arena does not start
 * under TSan).  Cases run in order, in this process, without a fork: a
 * failed check prints where and exits 1.  Timeouts are meson's.
 */
#ifndef KVT_TEST_LITE_H
#define KVT_TEST_LITE_H

#include <stdio.h>

struct lite_case {
	const char *suite;
	const char *name;
	void (*fn)(void);
	struct lite_case *next;
};

void lite_register(struct lite_case *c);
void lite_fail(const char *file, int line, const char *what)
	__attribute__((noreturn));

#define Test(suite, name, ...)						\
	static void suite##_##name(void);				\
	static struct lite_case lite_##suite##_##name = {		\
		#suite, #name, suite##_##name, NULL };			\
	__attribute__((constructor)) static void			\
	lite_reg_##suite##_##name(void)					\
	{								\
		lite_register(&lite_##suite##_##name);			\
	}								\
	static void suite##_##name(void)

#define cr_assert(cond, ...)						\
	((cond) ? (void)0 : lite_fail(__FILE__, __LINE__, #cond))
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b))
#define cr_assert_neq(a, b, ...) cr_assert((a) != (b))
#define cr_assert_gt(a, b, ...) cr_assert((a) > (b))
#define cr_assert_geq(a, b, ...) cr_assert((a) >= (b))
#define cr_assert_lt(a, b, ...) cr_assert((a) < (b))
#define cr_assert_leq(a, b, ...) cr_assert((a) <= (b))
#define cr_assert_not_null(p, ...) cr_assert((p) != NULL)
#define cr_log_info(...)						\
	do {								\
		printf("[----] " __VA_ARGS__);				\
		printf("\n");						\
	} while (0)

#endif
