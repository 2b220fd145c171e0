/*
 * Probe: what a lookup before a 4 KiB copy costs when the lookup's line
 * misses the CPU's caches. With the cached set spread over a file,
 * `read_at` of whole pages ran 0.65x a bare memcpy, 0.85-0.90x for a
 * dense set. Here, with nothing of the cache's code: 58 982 random pages of
 * a 230 MiB buffer (huge pages), a 64-byte "descriptor" per page (3.7 MB)
 * whose word is loaded before the copy and again after it (a seqlock
 * read), and a "leaf" table with one used 8-byte slot per 64-byte line
 * (3.7 MB: the spread set's index leaves) that names the page to copy.
 *
 *   gcc -O2 -mavx2 scripts/probe-overlap.c -o /tmp/probe-overlap && /tmp/probe-overlap
 *
 * Rows: the copy alone (glibc memcpy, one `rep movsb`, a 32-byte AVX
 * loop); the descriptor's load before and after it; the leaf's slot
 * loaded first (the copy's address depends on it), with and without the
 * descriptor.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <immintrin.h>
#define PS 4096
static size_t N = 58982;
static uint8_t *buf; static uint64_t *meta; static uint64_t *leaf; static uint32_t *perm;
static uint8_t dst[PS] __attribute__((aligned(64)));
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static inline void rep(void*d,const void*s,size_t n){asm volatile("rep movsb":"+D"(d),"+S"(s),"+c"(n)::"memory");}
static inline void avx(void*d,const void*s,size_t n){ for(size_t o=0;o<n;o+=128){__m256i a=_mm256_loadu_si256((const __m256i*)((const char*)s+o)),b=_mm256_loadu_si256((const __m256i*)((const char*)s+o+32)),c=_mm256_loadu_si256((const __m256i*)((const char*)s+o+64)),e=_mm256_loadu_si256((const __m256i*)((const char*)s+o+96)); _mm256_storeu_si256((__m256i*)((char*)d+o),a);_mm256_storeu_si256((__m256i*)((char*)d+o+32),b);_mm256_storeu_si256((__m256i*)((char*)d+o+64),c);_mm256_storeu_si256((__m256i*)((char*)d+o+96),e);} }
static uint64_t x=0x9E3779B97F4A7C15ull; static inline uint64_t rng(){x^=x<<13;x^=x>>7;x^=x<<17;return x;}
volatile uint64_t sink;
#define BENCH(name, body) { double t0=now(); long ops=0; while(now()-t0<1.0){ for(int k=0;k<1000;k++){ size_t i=rng()%N; body } ops+=1000;} printf("%-34s %6.1f ns\n", name, (now()-t0)*1e9/ops); }
int main(){
  buf = mmap(0, N*PS+(2<<20), PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS,-1,0); madvise(buf,N*PS+(2<<20),MADV_HUGEPAGE);
  memset(buf,1,N*PS);
  meta = aligned_alloc(2<<20, ((N*64+(2<<20))/(2<<20))*(2<<20)); madvise(meta,N*64,MADV_HUGEPAGE);
  for(size_t i=0;i<N;i++) meta[i*8]=2;
  size_t L = N*8; // leaf slots: one used per 8 (one line per page)
  leaf = aligned_alloc(2<<20, ((L*8+(2<<20))/(2<<20))*(2<<20)); madvise(leaf,L*8,MADV_HUGEPAGE);
  perm = malloc(N*4); for(size_t i=0;i<N;i++) perm[i]=i; for(size_t i=N-1;i>0;i--){size_t j=rng()%(i+1);uint32_t t=perm[i];perm[i]=perm[j];perm[j]=t;}
  for(size_t i=0;i<N;i++) leaf[i*8]=perm[i];
  for(int r=0;r<2;r++){
  BENCH("memcpy", memcpy(dst, buf+i*PS, PS); sink=dst[0];)
  BENCH("rep movsb", rep(dst, buf+i*PS, PS); sink=dst[0];)
  BENCH("avx loop", avx(dst, buf+i*PS, PS); sink=dst[0];)
  BENCH("meta+rep", uint64_t v=__atomic_load_n(&meta[i*8],__ATOMIC_ACQUIRE); if(v&1) abort(); rep(dst,buf+i*PS,PS); __atomic_thread_fence(__ATOMIC_ACQUIRE); if(__atomic_load_n(&meta[i*8],__ATOMIC_RELAXED)!=v) abort(); sink=dst[0];)
  BENCH("meta+avx", uint64_t v=__atomic_load_n(&meta[i*8],__ATOMIC_ACQUIRE); if(v&1) abort(); avx(dst,buf+i*PS,PS); __atomic_thread_fence(__ATOMIC_ACQUIRE); if(__atomic_load_n(&meta[i*8],__ATOMIC_RELAXED)!=v) abort(); sink=dst[0];)
  BENCH("leaf->meta+rep", size_t f=leaf[i*8]; uint64_t v=__atomic_load_n(&meta[f*8],__ATOMIC_ACQUIRE); if(v&1) abort(); rep(dst,buf+f*PS,PS); if(__atomic_load_n(&meta[f*8],__ATOMIC_RELAXED)!=v) abort(); sink=dst[0];)
  BENCH("leaf->meta+avx", size_t f=leaf[i*8]; uint64_t v=__atomic_load_n(&meta[f*8],__ATOMIC_ACQUIRE); if(v&1) abort(); avx(dst,buf+f*PS,PS); if(__atomic_load_n(&meta[f*8],__ATOMIC_RELAXED)!=v) abort(); sink=dst[0];)
  BENCH("leaf->rep (no meta)", size_t f=leaf[i*8]; rep(dst,buf+f*PS,PS); sink=dst[0];)
  }
}
