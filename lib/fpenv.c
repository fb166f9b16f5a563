/*
 * fpenv.c - the floating-point environment of the numerics contract.
 *
 * Results must not depend on the caller's environment, so every entry point
 * (and every OpenMP worker) runs with round-to-nearest-even, subnormals kept
 * (no flush-to-zero, no denormals-are-zero) and exceptions masked, then
 * restores exactly what it found (sticky exception flags included).
 */
#include "config.h"
#include "internal.h"

#include <fenv.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
/* MXCSR: all six exceptions masked (bits 7-12), round to nearest (bits
 * 13-14 = 0), FTZ (bit 15) and DAZ (bit 6) clear, no sticky flags. */
#define SMM_MXCSR_CONTRACT 0x1F80u
#endif

void smm_fpenv_enter(smm_fpenv *env)
{
#if defined(__x86_64__) || defined(__i386__)
    env->mxcsr = _mm_getcsr();
    _mm_setcsr(SMM_MXCSR_CONTRACT);
#else
    /* FE_DFL_ENV: round to nearest, exceptions masked, and on targets with
     * a flush-to-zero control (AArch64 FPCR.FZ, ARM FPSCR.FZ) that cleared. */
    fegetenv(&env->fe);
    fesetenv(FE_DFL_ENV);
#endif
}

void smm_fpenv_leave(const smm_fpenv *env)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(env->mxcsr);
#else
    fesetenv(&env->fe);
#endif
}
