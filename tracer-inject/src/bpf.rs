//! A classic-BPF interpreter for seccomp filters: runs a filter on a
//! `struct seccomp_data` the way the kernel does, so that we can tell in
//! advance what a target's filter would do with a system call.

/// One `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    pub(crate) code: u16,
    pub(crate) jt: u8,
    pub(crate) jf: u8,
    pub(crate) k: u32,
}

#[cfg(test)]
impl Insn {
    pub(crate) const fn stmt(code: u16, k: u32) -> Self {
        Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }
    pub(crate) const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Self {
        Insn { code, jt, jf, k }
    }
}

/// `struct seccomp_data`: what a seccomp filter sees.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SeccompData {
    pub(crate) nr: i32,
    pub(crate) arch: u32,
    pub(crate) instruction_pointer: u64,
    pub(crate) args: [u64; 6],
}

impl SeccompData {
    const LEN: u32 = 64;

    /// The 32-bit word at byte offset `off`, as the kernel's BPF_LD|BPF_W|BPF_ABS
    /// reads it (native, little-endian order; offsets must be 4-aligned).
    fn word(&self, off: u32) -> Option<u32> {
        if !off.is_multiple_of(4) || off >= Self::LEN {
            return None;
        }
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        Some(match off {
            0 => self.nr as u32,
            4 => self.arch,
            8 => lo(self.instruction_pointer),
            12 => hi(self.instruction_pointer),
            _ => {
                let i = ((off - 16) / 8) as usize;
                let v = self.args[i];
                if (off - 16).is_multiple_of(8) {
                    lo(v)
                } else {
                    hi(v)
                }
            }
        })
    }
}

/// Why a filter could not be run: the kernel would have refused to load it,
/// so seeing one of these means we misread the filter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BpfError {
    #[error("instruction {0}: unsupported opcode {1:#06x}")]
    BadOpcode(usize, u16),
    #[error("instruction {0}: load from offset {1} outside seccomp_data")]
    BadLoad(usize, u32),
    #[error("instruction {0}: jump out of the program")]
    BadJump(usize),
    #[error("instruction {0}: scratch memory index {1} out of range")]
    BadMem(usize, u32),
    #[error("program runs off its end")]
    NoReturn,
}

// Opcode fields (linux/bpf_common.h).
pub(crate) const LD: u16 = 0x00;
pub(crate) const LDX: u16 = 0x01;
pub(crate) const ST: u16 = 0x02;
pub(crate) const STX: u16 = 0x03;
pub(crate) const ALU: u16 = 0x04;
pub(crate) const JMP: u16 = 0x05;
pub(crate) const RET: u16 = 0x06;
pub(crate) const MISC: u16 = 0x07;
pub(crate) const W: u16 = 0x00;
pub(crate) const IMM: u16 = 0x00;
pub(crate) const ABS: u16 = 0x20;
pub(crate) const MEM: u16 = 0x60;
pub(crate) const LEN: u16 = 0x80;
pub(crate) const K: u16 = 0x00;
pub(crate) const X: u16 = 0x08;
pub(crate) const A: u16 = 0x10;
pub(crate) const JA: u16 = 0x00;
pub(crate) const JEQ: u16 = 0x10;
pub(crate) const JGT: u16 = 0x20;
pub(crate) const JGE: u16 = 0x30;
pub(crate) const JSET: u16 = 0x40;
pub(crate) const ADD: u16 = 0x00;
pub(crate) const SUB: u16 = 0x10;
pub(crate) const MUL: u16 = 0x20;
pub(crate) const DIV: u16 = 0x30;
pub(crate) const OR: u16 = 0x40;
pub(crate) const AND: u16 = 0x50;
pub(crate) const LSH: u16 = 0x60;
pub(crate) const RSH: u16 = 0x70;
pub(crate) const NEG: u16 = 0x80;
pub(crate) const MOD: u16 = 0x90;
pub(crate) const XOR: u16 = 0xa0;
pub(crate) const TAX: u16 = 0x00;
pub(crate) const TXA: u16 = 0x80;

/// Runs `prog` on `data` and returns the filter's 32-bit verdict.
pub(crate) fn run(prog: &[Insn], data: &SeccompData) -> Result<u32, BpfError> {
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; 16];
    let mut pc = 0usize;
    // Classic BPF only jumps forward, so a program ends within len steps.
    for _ in 0..=prog.len() {
        let Some(ins) = prog.get(pc) else {
            return Err(BpfError::NoReturn);
        };
        let at = pc;
        pc += 1;
        let class = ins.code & 0x07;
        match class {
            LD | LDX => {
                let v = match ins.code & 0xe0 {
                    IMM => ins.k,
                    LEN => SeccompData::LEN,
                    ABS if ins.code & 0x18 == W && class == LD => {
                        data.word(ins.k).ok_or(BpfError::BadLoad(at, ins.k))?
                    }
                    MEM => *mem.get(ins.k as usize).ok_or(BpfError::BadMem(at, ins.k))?,
                    _ => return Err(BpfError::BadOpcode(at, ins.code)),
                };
                if class == LD {
                    a = v;
                } else {
                    x = v;
                }
            }
            ST | STX => {
                let slot = mem
                    .get_mut(ins.k as usize)
                    .ok_or(BpfError::BadMem(at, ins.k))?;
                *slot = if class == ST { a } else { x };
            }
            ALU => {
                let src = if ins.code & X != 0 { x } else { ins.k };
                a = match ins.code & 0xf0 {
                    ADD => a.wrapping_add(src),
                    SUB => a.wrapping_sub(src),
                    MUL => a.wrapping_mul(src),
                    // The kernel ends the program with 0 on division by zero.
                    DIV if src == 0 => return Ok(0),
                    DIV => a / src,
                    MOD if src == 0 => return Ok(0),
                    MOD => a % src,
                    OR => a | src,
                    AND => a & src,
                    LSH => a.checked_shl(src).unwrap_or(0),
                    RSH => a.checked_shr(src).unwrap_or(0),
                    NEG => a.wrapping_neg(),
                    XOR => a ^ src,
                    _ => return Err(BpfError::BadOpcode(at, ins.code)),
                };
            }
            JMP => {
                let src = if ins.code & X != 0 { x } else { ins.k };
                let off = match ins.code & 0xf0 {
                    JA => ins.k as usize,
                    op => {
                        let taken = match op {
                            JEQ => a == src,
                            JGT => a > src,
                            JGE => a >= src,
                            JSET => a & src != 0,
                            _ => return Err(BpfError::BadOpcode(at, ins.code)),
                        };
                        usize::from(if taken { ins.jt } else { ins.jf })
                    }
                };
                pc = pc
                    .checked_add(off)
                    .filter(|&p| p < prog.len())
                    .ok_or(BpfError::BadJump(at))?;
            }
            RET => {
                return match ins.code & 0x18 {
                    K => Ok(ins.k),
                    A => Ok(a),
                    _ => Err(BpfError::BadOpcode(at, ins.code)),
                };
            }
            MISC => match ins.code & 0xf8 {
                TAX => x = a,
                TXA => a = x,
                _ => return Err(BpfError::BadOpcode(at, ins.code)),
            },
            _ => return Err(BpfError::BadOpcode(at, ins.code)),
        }
    }
    Err(BpfError::NoReturn)
}

#[cfg(test)]
#[path = "bpf_tests.rs"]
mod tests;
