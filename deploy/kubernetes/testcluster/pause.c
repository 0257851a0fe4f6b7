// SPDX-License-Identifier: Apache-2.0
// The pause process of the test cluster's Pod sandboxes (cluster.sh builds it with
// gcc -static into a one-file image, since no registry is reachable): it holds the Pod's
// namespaces, reaps the zombies it inherits as pid 1, and exits 0 on SIGINT or SIGTERM.
// The proof Pods of make test-k8s run it as their containers too.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { _exit(sig == SIGTERM || sig == SIGINT ? 0 : 2); }

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("keel pause 1");
    return 0;
  }
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) pause();
}
