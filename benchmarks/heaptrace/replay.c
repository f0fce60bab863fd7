/* Replay a heap trace against glibc: the prefix once, then the step section N times,
   printing each step's minor page faults and mallinfo2's arena, in-use bytes and top chunk.
   Input (from heaptrace.py): "M size 0 id 0", "A size align id 0", "F 0 0 id 0",
   "R size 0 id old", "S 0 0 0 0" (start of the step section), "L 0 0 id carried"
   (at the end of a step: rename a live object to the name the next step frees it by).
   Build: gcc -O2 -o replay replay.c; run: ./replay FILE STEPS */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
typedef struct { char op; size_t sz, al; unsigned long p, q; } Ev;
#define HS (1 << 24)
static unsigned long *hk; static void **hv;
static unsigned h(unsigned long k) { return (unsigned)(k * 2654435761u) & (HS - 1); }
static void put(unsigned long k, void *v) {
  unsigned i = h(k);
  while (hk[i] > 1 && hk[i] != k) i = (i + 1) & (HS - 1);
  hk[i] = k; hv[i] = v;
}
static void *take(unsigned long k) {
  unsigned i = h(k);
  while (hk[i]) {
    if (hk[i] == k) { void *v = hv[i]; hk[i] = 1; hv[i] = 0; return v; }
    i = (i + 1) & (HS - 1);
  }
  return NULL;
}
static void *alloc(size_t sz, size_t al) {
  void *p = al ? memalign(al, sz) : malloc(sz ? sz : 1);
  memset(p, 1, sz); /* the kernels write what they allocate */
  return p;
}
static void run(Ev *e) {
  if (e->op == 'M' || e->op == 'A') put(e->p, alloc(e->sz, e->al));
  else if (e->op == 'F') { void *x = take(e->p); if (x) free(x); }
  else if (e->op == 'R') { void *x = e->q ? take(e->q) : 0; put(e->p, realloc(x, e->sz)); }
  else if (e->op == 'L') { void *x = take(e->p); if (x) put(e->q, x); }
}
int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: replay FILE STEPS\n"); return 2; }
  hk = calloc(HS, sizeof *hk); hv = calloc(HS, sizeof *hv);
  FILE *f = fopen(argv[1], "r"); int steps = atoi(argv[2]);
  Ev *ev = malloc(sizeof(Ev) * 8000000); int n = 0, split = 0; char op; size_t a, b; unsigned long p, q;
  while (fscanf(f, " %c %zu %zu %lx %lx", &op, &a, &b, &p, &q) == 5) {
    if (op == 'S') { split = n; continue; }
    ev[n++] = (Ev){op, a, b, p, q};
  }
  for (int i = 0; i < split; i++) run(&ev[i]);
  struct rusage ru; getrusage(RUSAGE_SELF, &ru); long last = ru.ru_minflt;
  for (int s = 0; s < steps; s++) {
    for (int i = split; i < n; i++) run(&ev[i]);
    getrusage(RUSAGE_SELF, &ru); struct mallinfo2 mi = mallinfo2();
    printf("step %d faults %ld arena %zu used %zu top %zu\n", s, ru.ru_minflt - last, mi.arena, mi.uordblks, mi.keepcost);
    last = ru.ru_minflt;
  }
  return 0;
}
