/* LD_PRELOAD shim: every malloc/calloc/realloc/posix_memalign/memalign/free of the process
   to $RTRACE_FILE as "OP size align ptr old"; rtrace_mark(label) writes "= label".
   Build: gcc -O2 -shared -fPIC -o rtrace.so rtrace.c */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <fcntl.h>
#include <malloc.h>
#include <errno.h>
extern void *__libc_malloc(size_t);
extern void __libc_free(void*);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void*, size_t);
static int fd=-1, on=0;
static char buf[1<<16]; static int blen=0;
static void flush(void){ if(blen){ write(fd,buf,blen); blen=0; } }
static void init(void){ if(fd==-1){ const char*p=getenv("RTRACE_FILE"); if(p){fd=open(p,O_WRONLY|O_CREAT|O_APPEND,0644); on=1; atexit(flush);} else fd=-2; } }
static void rec(char c, size_t sz, size_t al, void*p, void*q){ init(); if(!on) return; if(blen>60000) flush(); blen+=snprintf(buf+blen,200,"%c %zu %zu %lx %lx\n",c,sz,al,(unsigned long)p,(unsigned long)q); }
void rtrace_mark(const char*s){ init(); if(!on) return; flush(); blen+=snprintf(buf+blen,200,"= %s\n",s); flush(); }
void *malloc(size_t n){ void*p=__libc_malloc(n); int e=errno; rec('M',n,0,p,0); errno=e; return p;}
void *calloc(size_t a,size_t b){ void*p=__libc_calloc(a,b); int e=errno; rec('M',a*b,0,p,0); errno=e; return p;}
void *realloc(void*q,size_t n){ void*p=__libc_realloc(q,n); int e=errno; rec('R',n,0,p,q); errno=e; return p;}
void free(void*p){ if(!p) return; int e=errno; __libc_free(p); rec('F',0,0,p,0); errno=e;}
int posix_memalign(void**r,size_t a,size_t n){ void*p=__libc_memalign(a,n); if(!p) return ENOMEM; *r=p; rec('A',n,a,p,0); return 0;}
void *aligned_alloc(size_t a,size_t n){ void*p=__libc_memalign(a,n); rec('A',n,a,p,0); return p;}
void *memalign(size_t a,size_t n){ void*p=__libc_memalign(a,n); rec('A',n,a,p,0); return p;}
