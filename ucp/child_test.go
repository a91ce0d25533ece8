package ucp_test

const childEnv = "UCXGO_UCP_TEST_CHILD"

func runChild(role string) int { return 2 }
