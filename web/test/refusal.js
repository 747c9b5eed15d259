/** What `call` throws, as "Name: message" (the tests' view of a refusal). */
export function refusal(call) {
  try {
    call();
  } catch (error) {
    return `${error.name}: ${error.message}`;
  }
  return "nothing thrown";
}
