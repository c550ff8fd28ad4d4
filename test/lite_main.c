/* SPDX-License-Identifier: BSD-3-Clause */
/* Runs the cases lite.h registered, in source order. */
#include <stdio.h>
#include <stdlib.h>

#include "lite.h"

static struct lite_case *cases, **cases_tail = &cases;
static const struct lite_case *running;

void
lite_register(struct lite_case *c)
{
	*cases_tail = c;
	cases_tail = &c->next;
}

void
lite_fail(const char *file, int line, const char *what)
{
	printf("[FAIL] %s::%s: %s:%d: %s\n", running->suite, running->name,
	       file, line, what);
	fflush(stdout);
	exit(1);
}

int
main(void)
{
	unsigned int n = 0;

	for (running = cases; running != NULL; running = running->next, n++) {
		printf("[RUN ] %s::%s\n", running->suite, running->name);
		fflush(stdout);
		running->fn();
		printf("[ OK ] %s::%s\n", running->suite, running->name);
	}
	printf("[====] Synthesis: Tested: %u | Passing: %u | Failing: 0\n", n, n);
	return 0;
}
