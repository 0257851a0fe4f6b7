/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the NF library. DPDK's EAL is started once, without hugepages
 * or devices, for NFs that use DPDK libraries (rte_lpm). */
#include <gtest/gtest.h>
#include <rte_eal.h>
#include <unistd.h>

#include <string>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  char prog[] = "functions_test";
  char a1[] = "--no-huge", a2[] = "--no-pci", a3[] = "-m", a4[] = "128",
       a5[] = "--log-level=error", a6[] = "--no-telemetry";
  std::string prefix = "--file-prefix=functions_test_" + std::to_string(getpid());
  char* eal_argv[] = {prog, a1, a2, a3, a4, a5, a6, prefix.data()};
  if (rte_eal_init(8, eal_argv) < 0) {
    fprintf(stderr, "functions_test: cannot start DPDK EAL\n");
    return 1;
  }
  int rc = RUN_ALL_TESTS();
  rte_eal_cleanup();
  return rc;
}
