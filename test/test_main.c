/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The main() of every Criterion test binary: Criterion's own, except that
 * a binary whose every case skipped exits 77, meson's code for a skipped
 * test (DPDK's TEST_SKIPPED), so a log that says OK means something ran.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>

static size_t tests_total, tests_skipped;

ReportHook(POST_ALL)(struct criterion_global_stats *st)
{
	tests_total = st->nb_tests;
	tests_skipped = st->tests_skipped;
}

int
main(int argc, char **argv)
{
	struct criterion_test_set *tests = criterion_initialize();
	int ret = 0;

	if (criterion_handle_args(argc, argv, true))
		ret = !criterion_run_all_tests(tests);
	criterion_finalize(tests);
	if (ret == 0 && tests_total > 0 && tests_skipped == tests_total)
		return 77;
	return ret;
}
