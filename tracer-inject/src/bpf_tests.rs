//! Unit tests of the classic-BPF interpreter.

use super::*;

const ARCH_X86_64: u32 = 0xc000_003e;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_ALLOW: u32 = 0x7fff_0000;

fn data(nr: i32) -> SeccompData {
    SeccompData {
        nr,
        arch: ARCH_X86_64,
        ..Default::default()
    }
}

/// The usual shape: check the arch, then kill on one syscall, allow the rest.
fn kill_one(nr: u32) -> Vec<Insn> {
    vec![
        Insn::stmt(LD | W | ABS, 4),
        Insn::jump(JMP | JEQ | K, ARCH_X86_64, 1, 0),
        Insn::stmt(RET | K, RET_KILL_PROCESS),
        Insn::stmt(LD | W | ABS, 0),
        Insn::jump(JMP | JEQ | K, nr, 0, 1),
        Insn::stmt(RET | K, RET_KILL_PROCESS),
        Insn::stmt(RET | K, RET_ALLOW),
    ]
}

#[test]
fn kill_one_syscall() {
    let prog = kill_one(319);
    assert_eq!(run(&prog, &data(319)), Ok(RET_KILL_PROCESS));
    assert_eq!(run(&prog, &data(9)), Ok(RET_ALLOW));
    let mut other_arch = data(9);
    other_arch.arch = 0x4000_0003; // i386
    assert_eq!(run(&prog, &other_arch), Ok(RET_KILL_PROCESS));
}

#[test]
fn argument_words_and_jset() {
    // Deny mmap when PROT_EXEC (4) is in arg 2, allow otherwise.
    let prog = vec![
        Insn::stmt(LD | W | ABS, 0),
        Insn::jump(JMP | JEQ | K, 9, 0, 3),
        Insn::stmt(LD | W | ABS, 16 + 2 * 8),
        Insn::jump(JMP | JSET | K, 4, 0, 1),
        Insn::stmt(RET | K, RET_ERRNO | 1),
        Insn::stmt(RET | K, RET_ALLOW),
    ];
    let mut d = data(9);
    d.args[2] = 3;
    assert_eq!(run(&prog, &d), Ok(RET_ALLOW));
    d.args[2] = 7;
    assert_eq!(run(&prog, &d), Ok(RET_ERRNO | 1));
    // High half of an argument.
    let hi = vec![Insn::stmt(LD | W | ABS, 16 + 8 + 4), Insn::stmt(RET | A, 0)];
    d.args[1] = 0x1234_5678_9abc_def0;
    assert_eq!(run(&hi, &d), Ok(0x1234_5678));
    let ip = vec![Insn::stmt(LD | W | ABS, 8), Insn::stmt(RET | A, 0)];
    d.instruction_pointer = 0x7fff_0000_1111;
    assert_eq!(run(&ip, &d), Ok(0x1111));
}

#[test]
fn comparisons() {
    // nr >= 400 -> errno, nr > 300 -> 1, else allow.
    let prog = vec![
        Insn::stmt(LD | W | ABS, 0),
        Insn::jump(JMP | JGE | K, 400, 0, 1),
        Insn::stmt(RET | K, RET_ERRNO | 38),
        Insn::jump(JMP | JGT | K, 300, 0, 1),
        Insn::stmt(RET | K, 1),
        Insn::stmt(RET | K, RET_ALLOW),
    ];
    assert_eq!(run(&prog, &data(435)), Ok(RET_ERRNO | 38));
    assert_eq!(run(&prog, &data(400)), Ok(RET_ERRNO | 38));
    assert_eq!(run(&prog, &data(399)), Ok(1));
    assert_eq!(run(&prog, &data(300)), Ok(RET_ALLOW));
}

#[test]
fn alu_memory_and_registers() {
    // A = ((nr + 5) * 3 - 1) ^ 0xff; M[3] = A; X = 2; A = A << X; A = A | M[3]
    let prog = vec![
        Insn::stmt(LD | W | ABS, 0),
        Insn::stmt(ALU | ADD | K, 5),
        Insn::stmt(ALU | MUL | K, 3),
        Insn::stmt(ALU | SUB | K, 1),
        Insn::stmt(ALU | XOR | K, 0xff),
        Insn::stmt(ST, 3),
        Insn::stmt(LDX | W | IMM, 2),
        Insn::stmt(ALU | LSH | X, 0),
        Insn::stmt(LDX | W | MEM, 3),
        Insn::stmt(ALU | OR | X, 0),
        Insn::stmt(RET | A, 0),
    ];
    let nr = 10u32;
    let m3 = ((nr + 5) * 3 - 1) ^ 0xff;
    assert_eq!(run(&prog, &data(nr as i32)), Ok((m3 << 2) | m3));

    // TAX/TXA, STX, DIV, MOD, AND, RSH, NEG, JA, LEN.
    let prog = vec![
        Insn::stmt(LD | W | IMM, 100),
        Insn::stmt(MISC | TAX, 0),
        Insn::stmt(STX, 15),
        Insn::stmt(LD | W | IMM, 7),
        Insn::stmt(MISC | TXA, 0),
        Insn::stmt(ALU | DIV | K, 7),
        Insn::stmt(ALU | MOD | K, 10),
        Insn::stmt(ALU | AND | K, 0xf),
        Insn::stmt(ALU | RSH | K, 1),
        Insn::stmt(ALU | NEG, 0),
        Insn::jump(JMP | JA, 1, 0, 0),
        Insn::stmt(RET | K, 0xdead),
        Insn::stmt(ST, 0),
        Insn::stmt(LD | W | LEN, 0),
        Insn::stmt(LDX | W | MEM, 0),
        Insn::stmt(ALU | ADD | X, 0),
        Insn::stmt(RET | A, 0),
    ];
    // 100/7 = 14; %10 = 4; &15 = 4; >>1 = 2; neg = -2; + len 64 = 62.
    assert_eq!(run(&prog, &data(0)), Ok(62));
}

#[test]
fn division_by_zero_returns_zero() {
    let prog = vec![
        Insn::stmt(LD | W | IMM, 5),
        Insn::stmt(LDX | W | IMM, 0),
        Insn::stmt(ALU | DIV | X, 0),
        Insn::stmt(RET | K, RET_ALLOW),
    ];
    assert_eq!(run(&prog, &data(0)), Ok(0));
}

#[test]
fn malformed_programs_are_errors() {
    assert_eq!(run(&[], &data(0)), Err(BpfError::NoReturn));
    let falls_off = vec![Insn::stmt(LD | W | ABS, 0)];
    assert_eq!(run(&falls_off, &data(0)), Err(BpfError::NoReturn));
    let bad_load = vec![Insn::stmt(LD | W | ABS, 64), Insn::stmt(RET | A, 0)];
    assert_eq!(run(&bad_load, &data(0)), Err(BpfError::BadLoad(0, 64)));
    let unaligned = vec![Insn::stmt(LD | W | ABS, 2), Insn::stmt(RET | A, 0)];
    assert_eq!(run(&unaligned, &data(0)), Err(BpfError::BadLoad(0, 2)));
    let bad_jump = vec![Insn::jump(JMP | JEQ | K, 0, 5, 5), Insn::stmt(RET | K, 0)];
    assert_eq!(run(&bad_jump, &data(0)), Err(BpfError::BadJump(0)));
    let bad_mem = vec![Insn::stmt(ST, 16), Insn::stmt(RET | K, 0)];
    assert_eq!(run(&bad_mem, &data(0)), Err(BpfError::BadMem(0, 16)));
    let byte_load = vec![Insn::stmt(LD | 0x10 | ABS, 0), Insn::stmt(RET | A, 0)];
    assert_eq!(run(&byte_load, &data(0)), Err(BpfError::BadOpcode(0, 0x30)));
}
