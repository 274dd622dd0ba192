// console entry point
