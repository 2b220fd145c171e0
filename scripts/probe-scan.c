/*
 * Probe: ways to read a file once, sequentially, into a 64 MiB ring of
 * anonymous memory (standing in for the cache's frames), with the kernel's
 * cache dropped first, and how much of the file the kernel's cache holds
 * meanwhile (mincore on a mapping of the file, every 256 MiB, and at the
 * end): which way to read a sequential stream on this machine.
 *
 *   gcc -O2 scripts/probe-scan.c -o /tmp/probe-scan
 *   sync; echo 3 > /proc/sys/vm/drop_caches; /tmp/probe-scan FILE MODE CHUNK_KIB
 *
 * MODE 0: O_DIRECT pread; 1: buffered pread; 2: buffered, POSIX_FADV_DONTNEED
 * of each chunk after it is read; 3: preadv2(RWF_DONTCACHE); 4: buffered,
 * DONTNEED of the chunk 8 MiB behind; 5: buffered, DONTNEED of the 8 MiB
 * block (8 MiB-aligned) that ended 8 MiB behind; 6: buffered, DONTNEED of
 * everything up to 8 MiB behind, every 8 MiB.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#ifndef RWF_DONTCACHE
#define RWF_DONTCACHE 0x00000080
#endif
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static long cached(const char*p,size_t len){int fd=open(p,O_RDONLY);void*m=mmap(0,len,PROT_READ,MAP_SHARED,fd,0);unsigned char*v=malloc(len/4096+1);mincore(m,len,v);long n=0;for(size_t i=0;i<len/4096;i++)n+=v[i]&1;munmap(m,len);close(fd);free(v);return n;}
int main(int c,char**v){const char*p=v[1];int mode=atoi(v[2]);size_t chunk=(size_t)atoi(v[3])<<10;
 int fd=open(p,O_RDONLY|(mode==0?O_DIRECT:0));off_t len=lseek(fd,0,SEEK_END);
 size_t ring=64<<20;char*buf=mmap(0,ring,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS|MAP_POPULATE,-1,0);
 long maxc=0;double t=now();size_t pos=0;
 for(off_t off=0;off<len;off+=chunk){char*b=buf+(pos%ring);pos+=chunk;
   ssize_t r;
   if(mode==3){struct iovec io={b,chunk};r=preadv2(fd,&io,1,off,RWF_DONTCACHE);}else r=pread(fd,b,chunk,off);
   if(r<=0){perror("read");return 1;}
   if(mode==2)posix_fadvise(fd,off,chunk,POSIX_FADV_DONTNEED);
   if(mode==5&&((off+chunk)&((8<<20)-1))==0&&off>=(16<<20))posix_fadvise(fd,off+chunk-(16<<20),8<<20,POSIX_FADV_DONTNEED);
   if(mode==6&&((off+chunk)&((8<<20)-1))==0)posix_fadvise(fd,0,off+chunk-(8<<20)>0?off+chunk-(8<<20):1,POSIX_FADV_DONTNEED);
   if(mode==4&&off>=(8<<20))posix_fadvise(fd,off-(8<<20),chunk,POSIX_FADV_DONTNEED);
   if((off&((256<<20)-1))==0){long cc=cached(p,len);if(cc>maxc)maxc=cc;}
 }
 double d=now()-t;printf("mode %d chunk %zuK: %.2f GB/s, max kernel cache seen %.1f%% of file, at end %.1f%%\n",mode,chunk>>10,len/d/1e9,100.0*maxc*4096/len,100.0*cached(p,len)*4096/len);}
